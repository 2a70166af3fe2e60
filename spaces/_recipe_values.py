"""How a space sets each config key, in words: the questions a recipe card asks of a space.

A key is *fixed* (the space's base, the one choice of its only param, or the trial setting's
default when the space leaves it alone), *searched* (one unconditional param: "searched: {64,
128}"), or set *per branch* (params with ``when`` conditions: "180 for backbone googlenet or
bninception; 100 for backbone resnet50"). :func:`cases` splits a space into the branches a card
must tell apart: one view per choice of the searched categorical keys a section depends on, each
view the space with those choices fixed (:meth:`Space.with_overrides`). :func:`grouped` then
merges the views that read alike and labels each group by what it covers.

Imports nothing of torch: the caller hands in the defaults (``default``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from dmlsearch.spaces._params import Param
from dmlsearch.spaces._params import format_value
from dmlsearch.spaces._params import is_in
from dmlsearch.spaces._space import Space

__all__ = ["Case", "Values", "cases", "grouped", "number"]

#: Above this many branches a section stops splitting its text by branch (a space that large
#: reads better as its param table, which ``spaces show`` prints above the card).
MAX_CASES = 64

Format = Callable[[Any], str]


def number(value: Any) -> str:
    """A number as a person writes it (100, 0.0001, 1e-5, true); other values as they are."""
    if isinstance(value, bool):
        return format_value(value)
    if not isinstance(value, (int, float)):
        return str(value)
    return re.sub(r"e([+-])0*(\d)", lambda m: f"e{m.group(1).strip('+')}{m.group(2)}",
                  f"{value:g}")


def _any_of(values: Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    if len(values) <= 1:
        return "".join(values)
    return f"{', '.join(values[:-1])} or {values[-1]}"


def _condition(clauses: Iterable[tuple[str, Sequence[Any]]]) -> str:
    """``backbone googlenet or bninception and loss proxy_anchor``."""
    return " and ".join(f"{key} {_any_of([format_value(v) for v in allowed])}"
                        for key, allowed in clauses)


class Values:
    """The keys of one space (or one branch of it), in words.

    ``default(key, fixed)`` gives the value a trial gets for a key the space does not set;
    ``fixed`` are the settings fixed at that point (a loss parameter's default depends on the
    loss).
    """

    def __init__(self, space: Space, default: Callable[[str, Mapping[str, Any]], Any]) -> None:
        self.space = space
        self._default = default

    def params(self, key: str) -> list[Param]:
        return [p for p in self.space.params if p.key == key]

    def is_fixed(self, key: str) -> bool:
        """Whether every trial of the space gets the same value of ``key``."""
        params = self.params(key)
        return not params or (len(params) == 1 and not params[0].when
                              and params[0].kind == "categorical" and len(params[0].choices) == 1)

    def value(self, key: str) -> Any:
        """The value of a fixed key (the base's, the only choice, else the default)."""
        assert self.is_fixed(key), f"{key} is searched in {self.space.name}"
        base = self.space.base
        params = self.params(key)
        if params:
            return params[0].choices[0]
        return base[key] if key in base else self._default(key, base)

    def text(self, key: str, fmt: Format = number) -> str:
        """The key's value, ``searched: ...`` or its values per branch, each value put through
        ``fmt``."""
        params = self.params(key)
        if self.is_fixed(key):
            return fmt(self.value(key))
        if len(params) == 1 and not params[0].when:
            return f"searched: {_domain(params[0], fmt)}"
        parts = [f"{_branch_value(p, fmt)} for {_condition(p.when)}" for p in params]
        if not self._covered(params):
            base = self.space.base
            parts.append(f"{fmt(self._default(key, base))} otherwise")
        return "; ".join(parts)

    def _covered(self, params: Sequence[Param]) -> bool:
        """Whether the branches leave no case to the default: they all test one key whose only
        (unconditional) param's choices they cover together."""
        keys = {key for p in params for key, _ in p.when}
        if len(keys) != 1 or any(len(p.when) != 1 for p in params):
            return False
        (selector,) = keys
        owners = self.params(selector)
        if len(owners) != 1 or owners[0].when or owners[0].kind != "categorical":
            return False
        allowed = [v for p in params for v in p.when[0][1]]
        return all(is_in(c, allowed) for c in owners[0].choices)


def _domain(p: Param, fmt: Format) -> str:
    if p.kind == "categorical":
        return "{" + ", ".join(fmt(c) for c in p.choices) + "}"
    scale = " log" if p.log else "" if p.step is None else f" step {fmt(p.step)}"
    return f"[{fmt(p.low)}, {fmt(p.high)}]{scale}"


def _branch_value(p: Param, fmt: Format) -> str:
    if p.kind == "categorical" and len(p.choices) == 1:
        return fmt(p.choices[0])
    return f"searched: {_domain(p, fmt)}"


@dataclasses.dataclass(frozen=True)
class Case:
    """One branch of a space: ``chosen`` (key -> value, in the order they were fixed) and the
    space with them fixed."""

    chosen: tuple[tuple[str, Any], ...]
    space: Space


def cases(space: Space, keys: Iterable[str], branches_of: Iterable[str] = ()) -> list[Case]:
    """The branches of ``space`` that the values of ``keys`` and ``branches_of`` depend on.

    A searched categorical key is split into one view per choice when it is one of ``keys``, or
    when a condition of a param of ``keys`` or ``branches_of`` tests it (and so on, through the
    conditions of its own params): ``branches_of`` are split by their branches only, not by the
    choices of a param that searches them everywhere. Views are built by fixing one key at a
    time in the params' order, so a key searched only in some branches is split only there.
    More than :data:`MAX_CASES` views: one case, the space itself (texts then say per branch).
    """
    found: list[Case] = []
    keys, branches_of = tuple(keys), tuple(branches_of)

    def walk(view: Space, chosen: tuple[tuple[str, Any], ...]) -> None:
        split = _next_split(view, keys, branches_of)
        if split is None:
            found.append(Case(chosen=chosen, space=view))
            return
        for choice in split.choices:
            if len(found) > MAX_CASES:
                return
            walk(view.with_overrides({split.key: choice}), (*chosen, (split.key, choice)))

    walk(space, ())
    return found if len(found) <= MAX_CASES else [Case(chosen=(), space=space)]


def _next_split(view: Space, keys: Sequence[str], branches_of: Sequence[str]) -> Param | None:
    tested: set[str] = set()
    sources = {*keys, *branches_of}
    while True:  # the keys that the conditions of the sources' params test, transitively
        more = {k for p in view.params if p.key in sources for k, _ in p.when} - sources
        if not more:
            break
        tested |= more
        sources |= more
    split = {*keys, *tested}
    values = Values(view, lambda key, fixed: None)
    return next((p for p in view.params if p.key in split and p.kind == "categorical"
                 and not p.when and not values.is_fixed(p.key)), None)


def grouped(found: Sequence[Case], render: Callable[[Case], str]) -> list[str]:
    """One line per distinct text of ``render`` over ``found``, in order of first appearance,
    each prefixed by the branches it covers (``backbone resnet50: ...``) unless there is one."""
    texts: dict[str, list[Case]] = {}
    for case in found:
        texts.setdefault(render(case), []).append(case)
    if len(texts) == 1:
        return list(texts)
    seen = _values_seen(found)
    return [f"{_label(group, seen)}: {text}" for text, group in texts.items()]


def _values_seen(found: Sequence[Case]) -> dict[str, list[Any]]:
    seen: dict[str, list[Any]] = {}
    for case in found:
        for key, value in case.chosen:
            values = seen.setdefault(key, [])
            if not is_in(value, values):
                values.append(value)
    return seen


def _label(group: Sequence[Case], seen: Mapping[str, Sequence[Any]]) -> str:
    """The branches of ``group``: a product of values per key where it is one (keys the group
    takes every value of are left out), else each branch in turn."""
    keys = [k for k, _ in group[0].chosen]
    if all([k for k, _ in case.chosen] == keys for case in group):
        values: dict[str, list[Any]] = {k: [] for k in keys}
        for case in group:
            for k, v in case.chosen:
                if not is_in(v, values[k]):
                    values[k].append(v)
        product = 1
        for k in keys:
            product *= len(values[k])
        if product == len(group):
            clauses = [(k, values[k]) for k in keys if len(values[k]) < len(seen[k])]
            return _condition(clauses) or "every branch"
    return "; ".join(_condition((k, [v]) for k, v in case.chosen) for case in group)

