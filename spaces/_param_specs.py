"""The ``params`` of a space file: each searched param's spec read and checked (its type, bounds,
step or log scale, choices, and the conditions ``when`` under which it is sampled), every error
naming its line; a key searched under several conditions gets exclusive branches and an Optuna
name per branch."""

from __future__ import annotations

import dataclasses
import math
from decimal import Decimal
from typing import Any

import yaml

from dmlsearch.spaces._params import KINDS
from dmlsearch.spaces._params import Param
from dmlsearch.spaces._params import format_value
from dmlsearch.spaces._params import is_in
from dmlsearch.spaces._yaml import EXAMPLE
from dmlsearch.spaces._yaml import Fields
from dmlsearch.spaces._yaml import Node
from dmlsearch.spaces._yaml import Nodes

__all__ = ["read_params"]

_NUMERIC_FIELDS = ("type", "low", "high", "step", "log", "when")
_FIELDS = {
    "float": _NUMERIC_FIELDS,
    "int": _NUMERIC_FIELDS,
    "categorical": ("type", "choices", "when"),
}
_ALL_FIELDS = ("type", "low", "high", "step", "log", "choices", "when")


def read_params(nodes: Nodes, node: Node, base: dict[str, Any]) -> list[Param]:
    entries: list[tuple[str, Node, Node, Fields]] = []  # key, key node, spec node, fields
    if isinstance(node, yaml.MappingNode):
        for key, (key_node, spec_node) in nodes.mapping(node, "params").items():
            entries.append((key, key_node, spec_node, _spec_fields(nodes, key, spec_node)))
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            entries.append(_list_item(nodes, item))
    else:
        raise nodes.error(node, f"params: expected a mapping (key: spec) or a list of "
                               f"specs, got {nodes.arrived(node)}; {EXAMPLE}")
    if not entries:
        raise nodes.error(node, "params: expected at least one searched param, got none; "
                               "add one (a space without params is a fixed config)")
    keys = [nodes.key(key_node, "params") for _, key_node, _, _ in entries]
    params: list[Param] = []
    for index, (key, key_node, spec_node, fields) in enumerate(entries):
        if key in base:
            raise nodes.error(key_node, f"params: {key!r} is both fixed in base and searched "
                                       f"here; expected each key in one place; remove it "
                                       f"from base or from params")
        params.append(_param(nodes, key, spec_node, fields, params, keys, index, base))
    return _name_branches(nodes, params)

def _list_item(nodes: Nodes, item: Node) -> tuple[str, Node, Node, Fields]:
    usage = "expected '- key: {type: ...}' or '- {name: key, type: ...}'"
    doc = "write it in one of those forms (see the docstring of spaces/_loader.py)"
    if not isinstance(item, yaml.MappingNode):
        raise nodes.error(item, f"params: list item: {usage}, got {nodes.arrived(item)}; "
                               f"{doc}")
    names = [nodes.value(k) for k, _ in item.value]
    if "name" in names:
        fields = nodes.mapping(item, "params: list item", ("name", *_ALL_FIELDS))
        key_node = fields.pop("name")[1]
        if not isinstance(nodes.value(key_node), str):
            raise nodes.error(key_node, f"params: name: expected a config key, got "
                                       f"{nodes.arrived(key_node)}; {doc}")
        key = nodes.value(key_node)
        _check_fields(nodes, key, item, fields)
        return key, key_node, item, fields
    if len(item.value) == 1 and isinstance(item.value[0][1], yaml.MappingNode):
        key_node, spec_node = item.value[0]
        key = nodes.value(key_node)
        if not isinstance(key, str):
            raise nodes.error(key_node, f"params: expected a text key, got "
                                       f"{nodes.arrived(key_node)}; {doc}")
        return key, key_node, spec_node, _spec_fields(nodes, key, spec_node)
    raise nodes.error(item, f"params: list item: {usage}, got a mapping with "
                           f"{', '.join(map(str, names))}; {doc}")

def _spec_fields(nodes: Nodes, key: str, node: Node) -> Fields:
    fields = nodes.mapping(node, f"params: {key}", _ALL_FIELDS)
    _check_fields(nodes, key, node, fields)
    return fields

def _check_fields(nodes: Nodes, key: str, node: Node, fields: Fields) -> None:
    if "type" not in fields:
        raise nodes.error(node, f"params: {key}: missing field 'type'; expected type: one of "
                               f"{', '.join(KINDS)}; add it")
    kind = nodes.value(fields["type"][1])
    if kind not in KINDS:
        raise nodes.error(fields["type"][1], f"params: {key}: type: expected one of "
                                            f"{', '.join(KINDS)}, got "
                                            f"{nodes.arrived(fields['type'][1])}; fix it")
    for name, (name_node, _) in fields.items():
        if name not in _FIELDS[kind]:
            raise nodes.error(name_node, f"params: {key}: field {name!r} does not apply to "
                                        f"type {kind}; expected only "
                                        f"{', '.join(_FIELDS[kind])}; remove it")

def _param(nodes: Nodes, key: str, spec: Node, fields: Fields, earlier: list[Param],
          keys: list[str], index: int, base: dict[str, Any]) -> Param:
    kind = nodes.value(fields["type"][1])
    where = f"params: {key}"
    line = spec.start_mark.line + 1
    when = _when(nodes, key, fields["when"][1], earlier, keys, index, base) \
        if "when" in fields else ()
    if kind == "categorical":
        choices = _choices(nodes, key, fields, spec)
        return Param(key=key, kind=kind, choices=choices, when=when, line=line)
    integer = kind == "int"
    for bound in ("low", "high"):
        if bound not in fields:
            raise nodes.error(spec, f"{where}: missing field {bound!r}; a {kind} param "
                                   f"needs low and high; add {bound}: <number>")
    low_node, high_node = fields["low"][1], fields["high"][1]
    low = _number(nodes, low_node, f"{where}: low", integer)
    high = _number(nodes, high_node, f"{where}: high", integer)
    if low > high:
        raise nodes.error(low_node, f"{where}: low {format_value(low)} > high "
                                   f"{format_value(high)}: the bounds are the wrong way "
                                   f"round; expected low < high; swap them")
    if low == high:
        raise nodes.error(low_node, f"{where}: low equals high ({format_value(low)}): the "
                                   f"range is empty; expected low < high; widen it or move "
                                   f"{key}: {format_value(low)} to base")
    log = False
    if "log" in fields:
        log_node = fields["log"][1]
        log = nodes.value(log_node)
        if not isinstance(log, bool):
            raise nodes.error(log_node, f"{where}: log: expected true or false, got "
                                       f"{nodes.arrived(log_node)}; fix it")
    step: float | int | None = None
    if "step" in fields:
        step_node = fields["step"][1]
        step = _number(nodes, step_node, f"{where}: step", integer)
        if log:
            raise nodes.error(step_node, f"{where}: log: true together with step: Optuna "
                                        f"forbids a step on a log scale; expected one of "
                                        f"them; remove step or log")
        if step <= 0:
            raise nodes.error(step_node, f"{where}: step: expected a number > 0, got "
                                        f"{format_value(step)}; fix it")
        span, size = Decimal(repr(high)) - Decimal(repr(low)), Decimal(repr(step))
        if size > span:  # decimal: 0.3 - 0.1 is not 0.19999999999999998 here
            raise nodes.error(step_node, f"{where}: step {format_value(step)} is larger "
                                        f"than the range [{format_value(low)}, "
                                        f"{format_value(high)}]; expected step <= high - "
                                        f"low; shrink the step or widen the range")
        if span % size:
            fitted = Decimal(repr(low)) + (span // size) * size
            raise nodes.error(step_node, f"{where}: the range [{format_value(low)}, "
                                        f"{format_value(high)}] is not a whole number of "
                                        f"steps of {format_value(step)} (Optuna would "
                                        f"silently lower high); expected high = low + n * "
                                        f"step; set high to {fitted}")
    if log and low <= 0:
        raise nodes.error(low_node, f"{where}: log scale needs low > 0"
                                   f"{' (at least 1 for int)' if integer else ''}, got low "
                                   f"{format_value(low)}; raise low or drop log")
    if log and integer and low < 1:
        raise nodes.error(low_node, f"{where}: an int log scale needs low >= 1, got "
                                   f"{low}; raise low or drop log")
    return Param(key=key, kind=kind, low=low, high=high, step=step, log=log, when=when,
                 line=line)

def _number(nodes: Nodes, node: Node, what: str, integer: bool) -> int | float:
    value = nodes.value(node) if isinstance(node, yaml.ScalarNode) else None
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        expected = "an integer" if integer else "a number"
        example = "e.g. 32" if integer else "e.g. 1.0e-3, unquoted"
        raise nodes.error(node, f"{what}: expected {expected}, got {nodes.arrived(node)}; "
                               f"write {expected} ({example})")
    if not integer and not math.isfinite(value):
        raise nodes.error(node, f"{what}: expected a finite number, got {value!r}; fix it")
    return int(value) if integer else float(value)

def _choices(nodes: Nodes, key: str, fields: Fields, spec: Node) -> tuple[Any, ...]:
    where = f"params: {key}: choices"
    if "choices" not in fields:
        raise nodes.error(spec, f"params: {key}: missing field 'choices'; a categorical "
                               f"param needs choices: [a, b, ...]; add it")
    node = fields["choices"][1]
    if not isinstance(node, yaml.SequenceNode):
        raise nodes.error(node, f"{where}: expected a list [a, b, ...], got "
                               f"{nodes.arrived(node)}; write the choices as a list")
    if not node.value:
        raise nodes.error(node, f"{where}: expected at least one choice, got an empty list; "
                               f"add choices (or move a single fixed value to base)")
    choices: list[Any] = []
    for item in node.value:
        value = nodes.scalar(item, where)
        if any(value == c for c in choices):  # Optuna cannot tell 1, 1.0 and true apart
            raise nodes.error(item, f"{where}: {value!r} is listed twice (Optuna treats "
                                   f"equal values such as 1, 1.0 and true as one); expected "
                                   f"distinct choices; remove the repeat")
        choices.append(value)
    return tuple(choices)

def _when(nodes: Nodes, key: str, node: Node, earlier: list[Param], keys: list[str], index: int,
         base: dict[str, Any]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    where = f"params: {key}: when"
    fields = nodes.mapping(node, where)
    if not fields:
        raise nodes.error(node, f"{where}: expected at least one condition key: value, got an"
                               f" empty mapping; remove when or add a condition")
    clauses = []
    for ref, (ref_node, values_node) in fields.items():
        if isinstance(values_node, yaml.SequenceNode):
            if not values_node.value:
                raise nodes.error(values_node, f"{where}: {ref}: expected a value or a "
                                              f"non-empty list, got an empty list; fix it")
            values = tuple(nodes.scalar(v, f"{where}: {ref}") for v in values_node.value)
            value_nodes = list(values_node.value)
        else:
            values = (nodes.scalar(values_node, f"{where}: {ref}"),)
            value_nodes = [values_node]
        if ref in base:
            clauses.append((ref, values))
            continue
        if ref == key:
            raise nodes.error(ref_node, f"{where}: {key} depends on itself; expected an "
                                       f"earlier param or a base key; remove this clause")
        positions = [i for i, k in enumerate(keys) if k == ref]
        if not positions:
            known = sorted({p.key for p in earlier} | set(base))
            raise nodes.error(ref_node, f"{where}: unknown key {ref!r}; expected an earlier "
                                       f"param or a base key ({', '.join(known)}); fix the "
                                       f"key or declare it first")
        if max(positions) >= index:
            raise nodes.error(ref_node, f"{where}: {ref!r} is declared at or after this "
                                       f"param, so its value is not known yet when {key} "
                                       f"is sampled; expected an earlier param; move "
                                       f"{ref} above {key}")
        refs = [p for p in earlier if p.key == ref]
        if any(p.kind == "float" for p in refs):
            raise nodes.error(ref_node, f"{where}: {ref!r} is a float param; expected a "
                                       f"categorical or int param (equality on sampled "
                                       f"floats is fragile); make {ref} categorical")
        for value, value_node in zip(values, value_nodes):
            if not any(p.contains(value) for p in refs):
                domains = " or ".join(f"{p.domain_text()} (line {p.line})" for p in refs)
                raise nodes.error(value_node, f"{where}: {ref} = {format_value(value)} can "
                                             f"never happen; expected a value in {domains};"
                                             f" fix the value")
        clauses.append((ref, values))
    return tuple(clauses)

def _name_branches(nodes: Nodes, params: list[Param]) -> list[Param]:
    """Check that repeats of a key are exclusive; give every param its Optuna name."""
    named: list[Param] = []
    seen: dict[str, Param] = {}
    for i, p in enumerate(params):
        same = [q for q in params[:i] if q.key == p.key]
        for q in same:
            if not _exclusive(p, q):
                raise nodes.error(p.line, f"params: {p.key} is searched twice with "
                                         f"conditions that can hold together (here "
                                         f"{p.when_text() or 'always'}; line {q.line}: "
                                         f"{q.when_text() or 'always'}); expected exclusive "
                                         f"branches; give both a condition on the same key "
                                         f"with disjoint values, e.g. when: {{loss: ...}}")
        repeated = sum(q.key == p.key for q in params) > 1
        name = f"{p.key}[{p.branch}]" if repeated else p.key
        if name in seen:
            raise nodes.error(p.line, f"params: {p.key}: two branches get the same Optuna "
                                     f"name {name!r} (line {seen[name].line}); expected "
                                     f"distinct condition values; reword a condition")
        seen[name] = p
        named.append(dataclasses.replace(p, optuna_name=name))
    return named


def _exclusive(a: Param, b: Param) -> bool:
    """Whether two conditions can never hold together: some common key with disjoint values."""
    b_when = dict(b.when)
    return any(
        key in b_when and not any(is_in(v, b_when[key]) for v in allowed)
        for key, allowed in a.when
    )
