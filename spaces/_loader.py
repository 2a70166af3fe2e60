"""Space files (YAML) → :class:`~spaces.Space`, validated, every error pointing at its line.

Grammar of a space file::

    name: quickstart            # required; a shipped space's name equals its file stem
    description: one paragraph  # optional
    source: "paper, table"      # required, non-empty: which published grid the space mirrors
    base:                       # optional: fixed settings, flat config key -> single value
      dataset: glyphs
      epochs: 8
    params:                     # required, non-empty: searched params, sampled in this order
      loss:           {type: categorical, choices: [multi_similarity, proxy_anchor]}
      lr:             {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
      batch_size:     {type: int, low: 32, high: 128, step: 16}
      loss.margin:    {type: float, low: 0.0, high: 1.0, step: 0.1, when: {loss: multi_similarity}}
    warm_start:                 # optional: points evaluated first (config keys -> values)
      - {loss: multi_similarity, loss.margin: 0.5}
    differences:                # optional: where the recipe knowingly differs from the
      - what: ResNet-18, not the code's PreAct-ResNet18   # authors' code, and why (both
        why: dmlsearch has no PreAct-ResNet18            # non-empty text; `spaces show`)

``params`` is either a mapping (config key -> spec; the common case) or, when a key is searched
more than once under different conditions (YAML mappings cannot repeat a key), a list whose items
are single-key mappings or mappings with an explicit ``name``::

    params:
      - loss: {type: categorical, choices: [multi_similarity, proxy_anchor]}
      - loss.margin: {type: float, low: 0.0, high: 1.0, step: 0.1, when: {loss: multi_similarity}}
      - {name: loss.margin, type: float, low: 0.0, high: 0.5, step: 0.1,
         when: {loss: proxy_anchor}}

A spec has ``type`` and, by type:

- ``float``: ``low``, ``high`` (low < high), optional ``step`` (> 0, the range a whole number of
  steps) or ``log: true`` (low > 0); not both (Optuna forbids it);
- ``int``: the same with integers (``step`` >= 1, ``log`` needs low >= 1);
- ``categorical``: ``choices``, a non-empty list of distinct single values;

and optionally ``when: {key: value}`` or ``{key: [v1, v2]}``: sample the param only when every
named key (an earlier categorical/int param, or a base key) has one of those values. Branches of
the same key must have exclusive conditions (a clause on a common key with disjoint values).

Config keys contain no whitespace, brackets or ``/`` (Ray nests keys at ``/``). Numbers such as
``1e-3`` are read as floats (plain PyYAML would read them as text).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from dmlsearch.spaces._param_specs import read_params
from dmlsearch.spaces._params import Param
from dmlsearch.spaces._params import format_value
from dmlsearch.spaces._params import is_in
from dmlsearch.spaces._space import Difference
from dmlsearch.spaces._space import Space
from dmlsearch.spaces._space import branch_states
from dmlsearch.spaces._yaml import EXAMPLE
from dmlsearch.spaces._yaml import Node
from dmlsearch.spaces._yaml import Nodes
from dmlsearch.spaces._yaml import parse_value
from dmlsearch.trainables.errors import UserError

__all__ = ["SHIPPED_DIR", "load_space", "parse_value", "space_names"]

SHIPPED_DIR = Path(__file__).resolve().parent / "files"

_TOP_FIELDS = ("name", "description", "source", "plugins", "base", "params", "warm_start",
               "differences")
_DIFFERENCE_FIELDS = ("what", "why")


def space_names() -> list[str]:
    """The names of the shipped spaces."""
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml"))


def load_space(name_or_path: str | os.PathLike[str]) -> Space:
    """Load a shipped space by name, or a space file by path; validate it.

    Every problem raises :class:`UserError` naming the file and line, what was expected, what
    arrived and the fix.
    """
    text = os.fspath(name_or_path)
    looks_like_path = (
        not isinstance(name_or_path, str)
        or text.endswith((".yaml", ".yml"))
        or "/" in text
        or os.sep in text
    )
    if not looks_like_path:
        shipped = SHIPPED_DIR / f"{text}.yaml"
        if shipped.is_file():
            return _load_file(shipped)
        if not Path(text).is_file():
            raise UserError(
                f"unknown space {text!r}; expected one of the shipped spaces "
                f"({', '.join(space_names())}) or a path to a .yaml space file"
            )
    path = Path(text)
    if not path.is_file():
        raise UserError(
            f"space file {text} does not exist; expected a shipped space name "
            f"({', '.join(space_names())}) or the path of an existing .yaml file"
        )
    return _load_file(path)


def _load_file(path: Path) -> Space:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read the space file ({e}); expected a UTF-8 "
                        f"YAML file; check the path and its permissions") from None
    shipped = path.resolve().parent == SHIPPED_DIR
    return _space(Nodes(path), text, shipped=shipped)


# -- the file: its top-level fields, base and warm starts (params: ._param_specs) ----------------

def _space(nodes: Nodes, text: str, *, shipped: bool) -> Space:
    root = nodes.compose(text)
    if root is None:
        raise nodes.error(1, f"the space file is empty; expected name, source and params; "
                            f"{EXAMPLE}")
    top = nodes.mapping(root, "space file", _TOP_FIELDS)
    for required in ("name", "source", "params"):
        if required not in top:
            raise nodes.error(root, f"missing required field {required!r}; expected the "
                                   f"fields name, source and params (optional: description,"
                                   f" plugins, base, warm_start, differences); add "
                                   f"{required}: ...")
    name = nodes.text(top["name"][1], "name")
    if shipped and name != nodes.path.stem:
        raise nodes.error(top["name"][1], f"name: a shipped space's name must equal its file "
                                         f"stem {nodes.path.stem!r}, got {name!r}; set "
                                         f"name: {nodes.path.stem}")
    description = (nodes.text(top["description"][1], "description", empty_ok=True)
                   if "description" in top else "")
    source = nodes.text(top["source"][1], "source")
    base = _base(nodes, top["base"][1]) if "base" in top else {}
    if "plugins" in top:  # imported first: the space may name what they register
        if "plugins" in base:
            raise nodes.error(top["plugins"][1], "plugins are given twice (plugins: and base: "
                                                "plugins:); keep the top-level plugins: list")
        base["plugins"] = _plugins(nodes, top["plugins"][1])
    params = read_params(nodes, top["params"][1], base)
    points = _warm_start(nodes, top["warm_start"][1], base, params) if "warm_start" in top \
        else []
    differences = _differences(nodes, top["differences"][1]) if "differences" in top else []
    return Space(name=name, description=description, source=source, path=nodes.path,
                 base=base, params=params, warm_start=points, differences=differences)


def _base(nodes: Nodes, node: Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode) and nodes.value(node) is None:
        return {}
    base: dict[str, Any] = {}
    for key, (key_node, value_node) in nodes.mapping(node, "base").items():
        base[nodes.key(key_node, "base")] = nodes.scalar(value_node, f"base: {key}")
    return base


def _plugins(nodes: Nodes, node: Node) -> list[str]:
    """``plugins:``, a list of .py files (relative to the space file) or module names, each
    imported now (trainables/plugins.py)."""
    from dmlsearch.trainables.plugins import load_plugins
    from dmlsearch.trainables.plugins import plugin_specs

    if isinstance(node, yaml.ScalarNode) and nodes.value(node) is None:
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise nodes.error(node, f"plugins: expected a list of .py files or module names, got "
                                f"{nodes.arrived(node)}; write '- my_loss.py' items")
    specs: list[str] = []
    for item in node.value:
        try:
            specs += plugin_specs([nodes.scalar(item, "plugins item")],
                                  relative_to=nodes.path.parent, where="plugins")
            load_plugins(specs[-1:])
        except UserError as exc:
            raise nodes.error(item, str(exc)) from None
    return specs


def _differences(nodes: Nodes, node: Node) -> list[Difference]:
    """``differences:``, a list of ``{what: ..., why: ...}`` items, both non-empty text."""
    if isinstance(node, yaml.ScalarNode) and nodes.value(node) is None:
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise nodes.error(node, f"differences: expected a list of {{what: ..., why: ...}} items"
                               f", got {nodes.arrived(node)}; write '- {{what: ..., why: ...}}' "
                               f"items")
    found = []
    for number, item in enumerate(node.value, start=1):
        where = f"differences item {number}"
        fields = nodes.mapping(item, where, _DIFFERENCE_FIELDS)
        for required in _DIFFERENCE_FIELDS:
            if required not in fields:
                raise nodes.error(item, f"{where}: missing {required!r}; expected what (where "
                                       f"the recipe differs from the authors' code) and why "
                                       f"(its reason), both non-empty text; add {required}: ...")
        found.append(Difference(what=nodes.text(fields["what"][1], f"{where}: what"),
                                why=nodes.text(fields["why"][1], f"{where}: why"),
                                line=item.start_mark.line + 1))
    return found


def _warm_start(nodes: Nodes, node: Node, base: dict[str, Any],
               params: list[Param]) -> list[dict[str, Any]]:
    if isinstance(node, yaml.ScalarNode) and nodes.value(node) is None:
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise nodes.error(node, f"warm_start: expected a list of points ({{key: value, ...}}"
                               f"), got {nodes.arrived(node)}; write '- {{lr: 1.0e-3}}' items")
    param_keys = {p.key for p in params}
    points = []
    for number, item in enumerate(node.value, start=1):
        where = f"warm_start point {number}"
        fields = nodes.mapping(item, where)
        if not fields:
            raise nodes.error(item, f"{where}: expected at least one key: value, got an empty"
                                   f" mapping; fill it in or remove it")
        point: dict[str, Any] = {}
        for key, (key_node, value_node) in fields.items():
            value = nodes.scalar(value_node, f"{where}: {key}")
            if key in base:
                if not is_in(value, [base[key]]):
                    raise nodes.error(value_node, f"{where}: {key} = {format_value(value)} "
                                                 f"contradicts base ({key}: "
                                                 f"{format_value(base[key])}); expected the"
                                                 f" base value or no {key}; remove it")
            elif key not in param_keys:
                raise nodes.error(key_node, f"{where}: unknown key {key!r}; expected a "
                                           f"searched param ({', '.join(sorted(param_keys))})"
                                           f" or a base key; fix or remove it")
            point[key] = value
        states = branch_states(params, base, point)
        for key, (key_node, value_node) in fields.items():
            if key in base:
                continue
            branches = [p for p, s in zip(params, states) if p.key == key and s is not False]
            if not branches:
                conds = "; ".join(f"line {p.line}: {p.when_text()}" for p in params
                                  if p.key == key)
                raise nodes.error(key_node, f"{where}: sets {key}, which is not searched at "
                                           f"this point (its condition is false: {conds}); "
                                           f"expected only active params; remove {key}")
            for p in branches:
                if not p.contains(point[key]):
                    scale = f", {p.scale_text()}" if p.scale_text() else ""
                    raise nodes.error(value_node, f"{where}: {key} = "
                                                 f"{format_value(point[key])} is not a "
                                                 f"value it can take; expected a value in "
                                                 f"{p.domain_text()}{scale} (line {p.line})"
                                                 f"; fix the value")
        points.append(point)
    return points
