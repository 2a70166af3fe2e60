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

import math
import os
import re
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from dmlsearch.spaces._params import KINDS
from dmlsearch.spaces._params import Param
from dmlsearch.spaces._params import format_value
from dmlsearch.spaces._params import is_in
from dmlsearch.spaces._space import KEY_PATTERN
from dmlsearch.spaces._space import Space
from dmlsearch.spaces._space import branch_states
from dmlsearch.trainables.errors import UserError

__all__ = ["SHIPPED_DIR", "load_space", "parse_value", "space_names"]

SHIPPED_DIR = Path(__file__).resolve().parent / "files"

_TOP_FIELDS = ("name", "description", "source", "base", "params", "warm_start")
_NUMERIC_FIELDS = ("type", "low", "high", "step", "log", "when")
_FIELDS = {
    "float": _NUMERIC_FIELDS,
    "int": _NUMERIC_FIELDS,
    "categorical": ("type", "choices", "when"),
}
_ALL_FIELDS = ("type", "low", "high", "step", "log", "choices", "when")
_EXAMPLE = "see spaces/files/quickstart.yaml for an example"


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-3`` / ``5E+2`` (no dot) as floats, like YAML 1.2."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_value(text: str) -> Any:
    """One value as a space file reads it (YAML, with ``1e-3`` a float), e.g. from ``--set``."""
    loader = _YamlLoader(text)  # a SafeLoader: plain data only
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


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
    return _Reader(path).space(text, shipped=shipped)


# -- the reader -----------------------------------------------------------------------------------

_Node = yaml.Node
_Fields = dict[str, tuple[_Node, _Node]]


class _Reader:
    """Walks the composed YAML node tree, so that every error can name its line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._constructor = _YamlLoader("")

    # -- primitives ------------------------------------------------------------------------------

    def error(self, at: _Node | int, message: str) -> UserError:
        line = at if isinstance(at, int) else at.start_mark.line + 1
        return UserError(f"{self.path}:{line}: {message}")

    def value(self, node: _Node) -> Any:
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as e:
            raise self.error(node, f"cannot read this value ({e}); expected plain YAML "
                                   f"scalars, lists and mappings; remove the tag") from None

    def arrived(self, node: _Node) -> str:
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        value = self.value(node)
        return f"{type(value).__name__} {value!r}" if value is not None else "nothing (null)"

    def mapping(self, node: _Node, what: str, allowed: Sequence[str] | None = None) -> _Fields:
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what}: expected a mapping (key: value lines), got "
                                   f"{self.arrived(node)}; {_EXAMPLE}")
        fields: _Fields = {}
        for key_node, value_node in node.value:
            key = self.value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str) or not key:
                raise self.error(key_node, f"{what}: expected a text key, got "
                                           f"{self.arrived(key_node)}; write the key as text")
            if key in fields:
                first = fields[key][0].start_mark.line + 1
                hint = ("; to search a key under several conditions write params as a list "
                        "(see the docstring of spaces/_loader.py)" if what == "params" else
                        "; keep one of them")
                raise self.error(key_node, f"{what}: {key!r} appears twice (first at line "
                                           f"{first}){hint}")
            if allowed is not None and key not in allowed:
                raise self.error(key_node, f"{what}: unknown field {key!r}; expected one of "
                                           f"{', '.join(allowed)}; fix the spelling or remove it")
            fields[key] = (key_node, value_node)
        return fields

    def text(self, node: _Node, what: str, *, empty_ok: bool = False) -> str:
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, str) or (not empty_ok and not value.strip()):
            raise self.error(node, f"{what}: expected {'text' if empty_ok else 'non-empty text'}"
                                   f", got {self.arrived(node)}; write it as a quoted string")
        return " ".join(value.split())

    def scalar(self, node: _Node, what: str) -> Any:
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(node, yaml.ScalarNode) or not isinstance(
            value, (str, int, float, bool, type(None))
        ):
            raise self.error(node, f"{what}: expected a single value (text, number, true/false "
                                   f"or null), got {self.arrived(node)}; write one value "
                                   f"(quote dates and the like)")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(node, f"{what}: expected a finite number, got {value!r}; "
                                   f"write a finite number")
        return value

    def key(self, node: _Node, what: str) -> str:
        key = self.value(node)
        if not KEY_PATTERN.fullmatch(key):
            raise self.error(node, f"{what}: {key!r} is not a valid config key; expected a name "
                                   f"without spaces, brackets or '/' (Ray nests keys at '/'), "
                                   f"such as 'loss.margin'; rename it")
        return str(key)

    # -- the file --------------------------------------------------------------------------------

    def compose(self, text: str) -> _Node | None:
        loader = _YamlLoader(text)
        try:
            return loader.get_single_node()
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = mark.line + 1 if mark is not None else 1
            what = "; ".join(x for x in (e.context, e.problem) if x)
            raise self.error(line, f"not valid YAML ({what}); expected a YAML mapping; check "
                                   f"the indentation, colons and quotes on this line or the "
                                   f"one before") from None
        except yaml.YAMLError as e:
            raise self.error(1, f"not valid YAML ({e}); expected a YAML mapping; "
                                f"{_EXAMPLE}") from None
        finally:
            loader.dispose()

    def space(self, text: str, *, shipped: bool) -> Space:
        root = self.compose(text)
        if root is None:
            raise self.error(1, f"the space file is empty; expected name, source and params; "
                                f"{_EXAMPLE}")
        top = self.mapping(root, "space file", _TOP_FIELDS)
        for required in ("name", "source", "params"):
            if required not in top:
                raise self.error(root, f"missing required field {required!r}; expected the "
                                       f"fields name, source and params (optional: description,"
                                       f" base, warm_start); add {required}: ...")
        name = self.text(top["name"][1], "name")
        if shipped and name != self.path.stem:
            raise self.error(top["name"][1], f"name: a shipped space's name must equal its file "
                                             f"stem {self.path.stem!r}, got {name!r}; set "
                                             f"name: {self.path.stem}")
        description = (self.text(top["description"][1], "description", empty_ok=True)
                       if "description" in top else "")
        source = self.text(top["source"][1], "source")
        base = self.base(top["base"][1]) if "base" in top else {}
        params = self.params(top["params"][1], base)
        points = self.warm_start(top["warm_start"][1], base, params) if "warm_start" in top \
            else []
        return Space(name=name, description=description, source=source, path=self.path,
                     base=base, params=params, warm_start=points)

    def base(self, node: _Node) -> dict[str, Any]:
        if isinstance(node, yaml.ScalarNode) and self.value(node) is None:
            return {}
        base: dict[str, Any] = {}
        for key, (key_node, value_node) in self.mapping(node, "base").items():
            base[self.key(key_node, "base")] = self.scalar(value_node, f"base: {key}")
        return base

    # -- params ----------------------------------------------------------------------------------

    def params(self, node: _Node, base: dict[str, Any]) -> list[Param]:
        entries: list[tuple[str, _Node, _Node, _Fields]] = []  # key, key node, spec node, fields
        if isinstance(node, yaml.MappingNode):
            for key, (key_node, spec_node) in self.mapping(node, "params").items():
                entries.append((key, key_node, spec_node, self.spec_fields(key, spec_node)))
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                entries.append(self.list_item(item))
        else:
            raise self.error(node, f"params: expected a mapping (key: spec) or a list of "
                                   f"specs, got {self.arrived(node)}; {_EXAMPLE}")
        if not entries:
            raise self.error(node, "params: expected at least one searched param, got none; "
                                   "add one (a space without params is a fixed config)")
        keys = [self.key(key_node, "params") for _, key_node, _, _ in entries]
        params: list[Param] = []
        for index, (key, key_node, spec_node, fields) in enumerate(entries):
            if key in base:
                raise self.error(key_node, f"params: {key!r} is both fixed in base and searched "
                                           f"here; expected each key in one place; remove it "
                                           f"from base or from params")
            params.append(self.param(key, spec_node, fields, params, keys, index, base))
        return self.name_branches(params)

    def list_item(self, item: _Node) -> tuple[str, _Node, _Node, _Fields]:
        usage = "expected '- key: {type: ...}' or '- {name: key, type: ...}'"
        doc = "write it in one of those forms (see the docstring of spaces/_loader.py)"
        if not isinstance(item, yaml.MappingNode):
            raise self.error(item, f"params: list item: {usage}, got {self.arrived(item)}; "
                                   f"{doc}")
        names = [self.value(k) for k, _ in item.value]
        if "name" in names:
            fields = self.mapping(item, "params: list item", ("name", *_ALL_FIELDS))
            key_node = fields.pop("name")[1]
            if not isinstance(self.value(key_node), str):
                raise self.error(key_node, f"params: name: expected a config key, got "
                                           f"{self.arrived(key_node)}; {doc}")
            key = self.value(key_node)
            self.check_fields(key, item, fields)
            return key, key_node, item, fields
        if len(item.value) == 1 and isinstance(item.value[0][1], yaml.MappingNode):
            key_node, spec_node = item.value[0]
            key = self.value(key_node)
            if not isinstance(key, str):
                raise self.error(key_node, f"params: expected a text key, got "
                                           f"{self.arrived(key_node)}; {doc}")
            return key, key_node, spec_node, self.spec_fields(key, spec_node)
        raise self.error(item, f"params: list item: {usage}, got a mapping with "
                               f"{', '.join(map(str, names))}; {doc}")

    def spec_fields(self, key: str, node: _Node) -> _Fields:
        fields = self.mapping(node, f"params: {key}", _ALL_FIELDS)
        self.check_fields(key, node, fields)
        return fields

    def check_fields(self, key: str, node: _Node, fields: _Fields) -> None:
        if "type" not in fields:
            raise self.error(node, f"params: {key}: missing field 'type'; expected type: one of "
                                   f"{', '.join(KINDS)}; add it")
        kind = self.value(fields["type"][1])
        if kind not in KINDS:
            raise self.error(fields["type"][1], f"params: {key}: type: expected one of "
                                                f"{', '.join(KINDS)}, got "
                                                f"{self.arrived(fields['type'][1])}; fix it")
        for name, (name_node, _) in fields.items():
            if name not in _FIELDS[kind]:
                raise self.error(name_node, f"params: {key}: field {name!r} does not apply to "
                                            f"type {kind}; expected only "
                                            f"{', '.join(_FIELDS[kind])}; remove it")

    def param(self, key: str, spec: _Node, fields: _Fields, earlier: list[Param],
              keys: list[str], index: int, base: dict[str, Any]) -> Param:
        kind = self.value(fields["type"][1])
        where = f"params: {key}"
        line = spec.start_mark.line + 1
        when = self.when(key, fields["when"][1], earlier, keys, index, base) \
            if "when" in fields else ()
        if kind == "categorical":
            choices = self.choices(key, fields, spec)
            return Param(key=key, kind=kind, choices=choices, when=when, line=line)
        integer = kind == "int"
        for bound in ("low", "high"):
            if bound not in fields:
                raise self.error(spec, f"{where}: missing field {bound!r}; a {kind} param "
                                       f"needs low and high; add {bound}: <number>")
        low_node, high_node = fields["low"][1], fields["high"][1]
        low = self.number(low_node, f"{where}: low", integer)
        high = self.number(high_node, f"{where}: high", integer)
        if low > high:
            raise self.error(low_node, f"{where}: low {format_value(low)} > high "
                                       f"{format_value(high)}: the bounds are the wrong way "
                                       f"round; expected low < high; swap them")
        if low == high:
            raise self.error(low_node, f"{where}: low equals high ({format_value(low)}): the "
                                       f"range is empty; expected low < high; widen it or move "
                                       f"{key}: {format_value(low)} to base")
        log = False
        if "log" in fields:
            log_node = fields["log"][1]
            log = self.value(log_node)
            if not isinstance(log, bool):
                raise self.error(log_node, f"{where}: log: expected true or false, got "
                                           f"{self.arrived(log_node)}; fix it")
        step: float | int | None = None
        if "step" in fields:
            step_node = fields["step"][1]
            step = self.number(step_node, f"{where}: step", integer)
            if log:
                raise self.error(step_node, f"{where}: log: true together with step: Optuna "
                                            f"forbids a step on a log scale; expected one of "
                                            f"them; remove step or log")
            if step <= 0:
                raise self.error(step_node, f"{where}: step: expected a number > 0, got "
                                            f"{format_value(step)}; fix it")
            span, size = Decimal(repr(high)) - Decimal(repr(low)), Decimal(repr(step))
            if size > span:  # decimal: 0.3 - 0.1 is not 0.19999999999999998 here
                raise self.error(step_node, f"{where}: step {format_value(step)} is larger "
                                            f"than the range [{format_value(low)}, "
                                            f"{format_value(high)}]; expected step <= high - "
                                            f"low; shrink the step or widen the range")
            if span % size:
                fitted = Decimal(repr(low)) + (span // size) * size
                raise self.error(step_node, f"{where}: the range [{format_value(low)}, "
                                            f"{format_value(high)}] is not a whole number of "
                                            f"steps of {format_value(step)} (Optuna would "
                                            f"silently lower high); expected high = low + n * "
                                            f"step; set high to {fitted}")
        if log and low <= 0:
            raise self.error(low_node, f"{where}: log scale needs low > 0"
                                       f"{' (at least 1 for int)' if integer else ''}, got low "
                                       f"{format_value(low)}; raise low or drop log")
        if log and integer and low < 1:
            raise self.error(low_node, f"{where}: an int log scale needs low >= 1, got "
                                       f"{low}; raise low or drop log")
        return Param(key=key, kind=kind, low=low, high=high, step=step, log=log, when=when,
                     line=line)

    def number(self, node: _Node, what: str, integer: bool) -> int | float:
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            expected = "an integer" if integer else "a number"
            example = "e.g. 32" if integer else "e.g. 1.0e-3, unquoted"
            raise self.error(node, f"{what}: expected {expected}, got {self.arrived(node)}; "
                                   f"write {expected} ({example})")
        if not integer and not math.isfinite(value):
            raise self.error(node, f"{what}: expected a finite number, got {value!r}; fix it")
        return int(value) if integer else float(value)

    def choices(self, key: str, fields: _Fields, spec: _Node) -> tuple[Any, ...]:
        where = f"params: {key}: choices"
        if "choices" not in fields:
            raise self.error(spec, f"params: {key}: missing field 'choices'; a categorical "
                                   f"param needs choices: [a, b, ...]; add it")
        node = fields["choices"][1]
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, f"{where}: expected a list [a, b, ...], got "
                                   f"{self.arrived(node)}; write the choices as a list")
        if not node.value:
            raise self.error(node, f"{where}: expected at least one choice, got an empty list; "
                                   f"add choices (or move a single fixed value to base)")
        choices: list[Any] = []
        for item in node.value:
            value = self.scalar(item, where)
            if any(value == c for c in choices):  # Optuna cannot tell 1, 1.0 and true apart
                raise self.error(item, f"{where}: {value!r} is listed twice (Optuna treats "
                                       f"equal values such as 1, 1.0 and true as one); expected "
                                       f"distinct choices; remove the repeat")
            choices.append(value)
        return tuple(choices)

    def when(self, key: str, node: _Node, earlier: list[Param], keys: list[str], index: int,
             base: dict[str, Any]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
        where = f"params: {key}: when"
        fields = self.mapping(node, where)
        if not fields:
            raise self.error(node, f"{where}: expected at least one condition key: value, got an"
                                   f" empty mapping; remove when or add a condition")
        clauses = []
        for ref, (ref_node, values_node) in fields.items():
            if isinstance(values_node, yaml.SequenceNode):
                if not values_node.value:
                    raise self.error(values_node, f"{where}: {ref}: expected a value or a "
                                                  f"non-empty list, got an empty list; fix it")
                values = tuple(self.scalar(v, f"{where}: {ref}") for v in values_node.value)
                value_nodes = list(values_node.value)
            else:
                values = (self.scalar(values_node, f"{where}: {ref}"),)
                value_nodes = [values_node]
            if ref in base:
                clauses.append((ref, values))
                continue
            if ref == key:
                raise self.error(ref_node, f"{where}: {key} depends on itself; expected an "
                                           f"earlier param or a base key; remove this clause")
            positions = [i for i, k in enumerate(keys) if k == ref]
            if not positions:
                known = sorted({p.key for p in earlier} | set(base))
                raise self.error(ref_node, f"{where}: unknown key {ref!r}; expected an earlier "
                                           f"param or a base key ({', '.join(known)}); fix the "
                                           f"key or declare it first")
            if max(positions) >= index:
                raise self.error(ref_node, f"{where}: {ref!r} is declared at or after this "
                                           f"param, so its value is not known yet when {key} "
                                           f"is sampled; expected an earlier param; move "
                                           f"{ref} above {key}")
            refs = [p for p in earlier if p.key == ref]
            if any(p.kind == "float" for p in refs):
                raise self.error(ref_node, f"{where}: {ref!r} is a float param; expected a "
                                           f"categorical or int param (equality on sampled "
                                           f"floats is fragile); make {ref} categorical")
            for value, value_node in zip(values, value_nodes):
                if not any(p.contains(value) for p in refs):
                    domains = " or ".join(f"{p.domain_text()} (line {p.line})" for p in refs)
                    raise self.error(value_node, f"{where}: {ref} = {format_value(value)} can "
                                                 f"never happen; expected a value in {domains};"
                                                 f" fix the value")
            clauses.append((ref, values))
        return tuple(clauses)

    def name_branches(self, params: list[Param]) -> list[Param]:
        """Check that repeats of a key are exclusive; give every param its Optuna name."""
        import dataclasses

        named: list[Param] = []
        seen: dict[str, Param] = {}
        for i, p in enumerate(params):
            same = [q for q in params[:i] if q.key == p.key]
            for q in same:
                if not _exclusive(p, q):
                    raise self.error(p.line, f"params: {p.key} is searched twice with "
                                             f"conditions that can hold together (here "
                                             f"{p.when_text() or 'always'}; line {q.line}: "
                                             f"{q.when_text() or 'always'}); expected exclusive "
                                             f"branches; give both a condition on the same key "
                                             f"with disjoint values, e.g. when: {{loss: ...}}")
            repeated = sum(q.key == p.key for q in params) > 1
            name = f"{p.key}[{p.branch}]" if repeated else p.key
            if name in seen:
                raise self.error(p.line, f"params: {p.key}: two branches get the same Optuna "
                                         f"name {name!r} (line {seen[name].line}); expected "
                                         f"distinct condition values; reword a condition")
            seen[name] = p
            named.append(dataclasses.replace(p, optuna_name=name))
        return named

    # -- warm starts -----------------------------------------------------------------------------

    def warm_start(self, node: _Node, base: dict[str, Any],
                   params: list[Param]) -> list[dict[str, Any]]:
        if isinstance(node, yaml.ScalarNode) and self.value(node) is None:
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, f"warm_start: expected a list of points ({{key: value, ...}}"
                                   f"), got {self.arrived(node)}; write '- {{lr: 1.0e-3}}' items")
        param_keys = {p.key for p in params}
        points = []
        for number, item in enumerate(node.value, start=1):
            where = f"warm_start point {number}"
            fields = self.mapping(item, where)
            if not fields:
                raise self.error(item, f"{where}: expected at least one key: value, got an empty"
                                       f" mapping; fill it in or remove it")
            point: dict[str, Any] = {}
            for key, (key_node, value_node) in fields.items():
                value = self.scalar(value_node, f"{where}: {key}")
                if key in base:
                    if not is_in(value, [base[key]]):
                        raise self.error(value_node, f"{where}: {key} = {format_value(value)} "
                                                     f"contradicts base ({key}: "
                                                     f"{format_value(base[key])}); expected the"
                                                     f" base value or no {key}; remove it")
                elif key not in param_keys:
                    raise self.error(key_node, f"{where}: unknown key {key!r}; expected a "
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
                    raise self.error(key_node, f"{where}: sets {key}, which is not searched at "
                                               f"this point (its condition is false: {conds}); "
                                               f"expected only active params; remove {key}")
                for p in branches:
                    if not p.contains(point[key]):
                        scale = f", {p.scale_text()}" if p.scale_text() else ""
                        raise self.error(value_node, f"{where}: {key} = "
                                                     f"{format_value(point[key])} is not a "
                                                     f"value it can take; expected a value in "
                                                     f"{p.domain_text()}{scale} (line {p.line})"
                                                     f"; fix the value")
            points.append(point)
        return points


def _exclusive(a: Param, b: Param) -> bool:
    """Whether two conditions can never hold together: some common key with disjoint values."""
    b_when = dict(b.when)
    return any(
        key in b_when and not any(is_in(v, b_when[key]) for v in allowed)
        for key, allowed in a.when
    )
