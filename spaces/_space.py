"""The :class:`Space` object: fixed base settings + searched params + warm-start points.

A space keeps what its file *declared* and the overrides applied to it; everything public
(``base``, ``params``, warm starts) is resolved from those two, so ``with_overrides`` can be
chained and an override can switch a branch back on (``loss=proxy_anchor``, then
``loss=multi_similarity``). ``with_converted_values`` instead rewrites a key's values everywhere
(fixed value, choices, conditions, warm starts), as if the file had been written with others:
how ``spaces._preview`` sizes a space for the built-in data without changing its branches.

Resolution against the fixed settings (base ∪ overrides):
- a param whose key is fixed is no longer searched (every branch of it);
- a ``when`` clause on a fixed key is true (clause removed) or false (param dropped);
- a clause on a key whose every branch was dropped is false (param dropped).
What remains in ``params`` has conditions on earlier *searched* keys only.

Optuna names: a key declared once is its own name; a key declared several times (one branch per
``when``) gets ``key[branch]``, ``branch`` being the condition's values (``a|b`` within a clause,
``,`` between clauses), e.g. ``loss.margin[proxy_anchor]``. :func:`config_from_sample` strips that
suffix again, without needing the space (it runs in Ray workers).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from dmlsearch.spaces._design import sobol_points
from dmlsearch.spaces._grid import cover_evenly
from dmlsearch.spaces._params import Param
from dmlsearch.spaces._params import format_value
from dmlsearch.spaces._params import is_in
from dmlsearch.spaces._params import same_value
from dmlsearch.trainables.errors import UserError

if TYPE_CHECKING:  # optuna is only needed by the caller, who hands us a trial
    import optuna

__all__ = ["Difference", "Space", "config_from_sample", "KEY_PATTERN"]

#: Flat config keys: no whitespace, no brackets (optuna-name suffix), no ``/`` (Ray's
#: ``unflatten_dict`` delimiter: Ray would nest such a key).
KEY_PATTERN = re.compile(r"[^\s/\[\]]+")
_SUFFIX = re.compile(r"(?P<key>[^\[\]]+)\[[^\[\]]*\]")


@dataclasses.dataclass(frozen=True)
class Difference:
    """Where a space's recipe knowingly differs from its authors' code (``what``) and ``why``;
    ``line``: where its file declares it (0 when unknown)."""

    what: str
    why: str
    line: int = 0


def config_from_sample(sampled: Mapping[str, Any]) -> dict[str, Any]:
    """A Ray trial config (Optuna names + constants) → a flat config with config keys.

    ``key[branch]`` becomes ``key``; everything else is kept as it is. A pure function of the dict.
    """
    out: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for name, value in sampled.items():
        m = _SUFFIX.fullmatch(name)
        key = m.group("key") if m else name
        if key in out and not same_value(out[key], value):
            raise ValueError(
                f"sample sets {key!r} twice: {origin[key]}={out[key]!r} and {name}={value!r}"
            )
        out[key] = value
        origin[key] = name
    return out


# -- resolution helpers ---------------------------------------------------------------------------


def resolve(declared: Sequence[Param], fixed: Mapping[str, Any]) -> tuple[Param, ...]:
    """The params still searched when the keys of ``fixed`` have fixed values (see module doc)."""
    kept: list[Param] = []
    for p in declared:
        if p.key in fixed:
            continue
        clauses = []
        alive = True
        for key, allowed in p.when:
            if key in fixed:
                if not is_in(fixed[key], allowed):
                    alive = False
                    break
            elif any(q.key == key for q in kept):
                clauses.append((key, allowed))
            else:  # the key is never sampled any more: the condition can't hold
                alive = False
                break
        if alive:
            kept.append(p if len(clauses) == len(p.when) else
                        dataclasses.replace(p, when=tuple(clauses)))
    return tuple(kept)


def branch_states(
    params: Sequence[Param], fixed: Mapping[str, Any], point: Mapping[str, Any]
) -> list[bool | None]:
    """For a partial assignment (``point`` gives some params), whether each param is active:
    True, False, or None (it depends on values the point leaves to the sampler)."""
    states: list[bool | None] = []

    def key_in_effect(key: str, upto: int) -> bool | None:
        """Is ``point[key]`` actually the value of ``key`` (is some branch of it active)?"""
        seen = [states[i] for i in range(upto) if params[i].key == key]
        if any(s is True for s in seen):
            return True
        if all(s is False for s in seen):
            return False
        return None

    for i, p in enumerate(params):
        state: bool | None = True
        for key, allowed in p.when:
            if key in fixed:
                clause: bool | None = is_in(fixed[key], allowed)
            elif key in point:
                clause = key_in_effect(key, i) if is_in(point[key], allowed) else False
            else:
                clause = False if key_in_effect(key, i) is False else None
            if clause is False:
                state = False
                break
            if clause is None:
                state = None
        states.append(state)
    return states


def _merged(values: Iterable[Any]) -> tuple[Any, ...]:
    """The values in order, each once (``same_value``: ``1`` and ``True`` stay apart)."""
    out: list[Any] = []
    for value in values:
        if not is_in(value, out):
            out.append(value)
    return tuple(out)


def _converted(p: Param, convert: Callable[[Any], Any]) -> Param:
    """``p`` with its choices, or its range's bounds, put through ``convert``."""
    if p.kind == "categorical":
        return dataclasses.replace(p, choices=_merged(convert(c) for c in p.choices))
    assert p.low is not None and p.high is not None
    integer = p.kind == "int"
    low, high = convert(p.low), convert(p.high)
    low, high = (int(low), int(high)) if integer else (float(low), float(high))
    if low == high:
        return dataclasses.replace(p, kind="categorical", choices=(low,), low=None, high=None,
                                   step=None, log=False)
    if low > high:
        raise ValueError(f"converting {p.optuna_name} swapped its bounds: {low} > {high}")
    step: float | int | None = None
    if p.step is not None:  # the same number of steps, where the new span divides into them
        count = (Decimal(repr(p.high)) - Decimal(repr(p.low))) / Decimal(repr(p.step))
        size = (Decimal(repr(high)) - Decimal(repr(low))) / count
        if integer:
            step = int(size) if size == size.to_integral_value() and size >= 1 else 1
        else:
            step = float(size)
    log = p.log and low > 0 and (not integer or low >= 1)
    return dataclasses.replace(p, low=low, high=high, step=step, log=log)


def _renamed(params: Sequence[Param]) -> list[Param]:
    """Optuna names from the (converted) conditions, as the loader gives them: ``key`` for a key
    declared once, ``key[branch]`` for each branch of a repeated key, which must stay exclusive."""
    out: list[Param] = []
    for i, p in enumerate(params):
        same = [q for q in params if q.key == p.key]
        for q in params[:i]:
            if q.key == p.key and not _exclusive(p, q):
                raise UserError(
                    f"{p.key} is searched under conditions that now hold together ("
                    f"{p.when_text() or 'always'}; {q.when_text() or 'always'}): values its "
                    "conditions test were merged; expected branches that stay apart; search "
                    "the space without converting those values"
                )
        name = f"{p.key}[{p.branch}]" if len(same) > 1 else p.key
        out.append(dataclasses.replace(p, optuna_name=name))
    return out


def _exclusive(a: Param, b: Param) -> bool:
    """Whether two conditions can never hold together: some common key with disjoint values."""
    b_when = dict(b.when)
    return any(key in b_when and not any(is_in(v, b_when[key]) for v in allowed)
               for key, allowed in a.when)


class Space:
    """A search space: fixed ``base`` settings, searched ``params`` (sampled in order, each
    possibly conditional on earlier ones), optional warm-start points and the known
    ``differences`` of its recipe from its authors' code.

    Build with :func:`spaces.load_space`; derive variants with :meth:`with_overrides`.
    """

    def __init__(
        self,
        *,
        name: str,
        description: str,
        source: str,
        path: Path | None,
        base: Mapping[str, Any],
        params: Iterable[Param],
        warm_start: Iterable[Mapping[str, Any]] = (),
        overrides: Mapping[str, Any] | None = None,
        differences: Iterable[Difference] = (),
    ) -> None:
        self.name = name
        self.description = description
        self.source = source
        self.path = path
        self.differences = tuple(differences)
        self._declared_base = dict(base)
        self._declared_params = tuple(params)
        self._declared_points = tuple(dict(p) for p in warm_start)
        self._overrides = dict(overrides or {})
        self._base = {**self._declared_base, **self._overrides}
        self._params = resolve(self._declared_params, self._base)
        self._points = self._filter_points()

    # -- public views -----------------------------------------------------------------------------

    @property
    def base(self) -> dict[str, Any]:
        """The fixed settings (declared base updated by the overrides); a copy."""
        return dict(self._base)

    @property
    def params(self) -> tuple[Param, ...]:
        """The searched params, in sampling order, conditions resolved against ``base``."""
        return self._params

    @property
    def overrides(self) -> dict[str, Any]:
        return dict(self._overrides)

    def keys(self) -> set[str]:
        """Every config key the space can produce (base + searched params)."""
        return set(self._base) | {p.key for p in self._params}

    def __repr__(self) -> str:
        return (f"Space(name={self.name!r}, params={[p.optuna_name for p in self._params]}, "
                f"base={self._base!r})")

    # -- deriving ---------------------------------------------------------------------------------

    def with_overrides(self, overrides: Mapping[str, Any]) -> Space:
        """A new space where ``overrides`` (config keys → values) are fixed in ``base``.

        A searched key that is overridden stops being searched (all its branches); conditions on it
        are resolved against the fixed value; warm starts lose the overridden keys, and a point
        that contradicts an override is dropped. New keys are allowed (the trial config validates
        them later).
        """
        for key in overrides:
            if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
                raise UserError(
                    f"override key {key!r} is not a config key: expected a name without spaces, "
                    f"'/' or brackets such as 'epochs' or 'loss.margin'; fix the override"
                )
        return Space(
            name=self.name,
            description=self.description,
            source=self.source,
            path=self.path,
            base=self._declared_base,
            params=self._declared_params,
            warm_start=self._declared_points,
            overrides={**self._overrides, **overrides},
            differences=self.differences,
        )

    def with_converted_values(self, key: str, convert: Callable[[Any], Any]) -> Space:
        """A new space as if its file had given ``key`` the values ``convert`` returns.

        Every value of ``key`` goes through ``convert``: its fixed value (base or override; a
        changed one becomes an override), the choices of each param that searches it (order kept,
        repeats merged) or a range's bounds (``convert`` must keep their order: the range keeps
        its number of steps where the new bounds allow, and a range that closes becomes a single
        choice), the values ``when`` clauses test it for, and the warm starts' values. So which
        branch a sample takes does not change: a clause on a fixed ``key`` is settled against its
        old value first (a param whose clause was false is dropped: it was never searched).
        Branches of a key that the conversion makes overlap raise :class:`UserError`.
        """
        fixed = key in self._base
        old = self._base.get(key)
        params: list[Param] = []
        for p in self._declared_params:
            when: list[tuple[str, tuple[Any, ...]]] = []
            alive = True
            for ref, allowed in p.when:
                if ref == key and fixed:
                    alive = alive and is_in(old, allowed)
                    allowed = (convert(old),)
                elif ref == key:
                    allowed = _merged(convert(v) for v in allowed)
                when.append((ref, allowed))
            if alive:
                p = dataclasses.replace(p, when=tuple(when))
                params.append(_converted(p, convert) if p.key == key else p)
        params = _renamed(params)
        points = [{k: convert(v) if k == key else v for k, v in point.items()}
                  for point in self._declared_points]
        overrides = dict(self._overrides)
        if fixed and not same_value(convert(old), old):
            overrides[key] = convert(old)
        return Space(name=self.name, description=self.description, source=self.source,
                     path=self.path, base=self._declared_base, params=params,
                     warm_start=points, overrides=overrides, differences=self.differences)

    # -- Optuna -----------------------------------------------------------------------------------

    def define_by_run(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample the active params in order on ``trial``; return the constants for Ray.

        Returns ``base`` plus the cleaned sampled values under their Optuna names (Python
        ``int``/``float``, step floats exactly on their grid). Ray's ``OptunaSearch`` merges this
        dict over the values it captured from the ``suggest_*`` calls, so the trial config gets the
        clean values; ``config_from_sample`` of the result is the flat trial config.
        """
        out = dict(self._base)
        values: dict[str, Any] = {}
        for p in self._params:
            if p.is_active(values):
                value = p.suggest(trial)
                values[p.key] = value
                out[p.optuna_name] = value
        return out

    def grid_points(self, *, limit: int = 100_000) -> list[dict[str, Any]]:
        """Every point of a grid study, in Optuna names: the product of the active params'
        values, walking the params in order so a conditional param multiplies only its branch.

        Each param must be categorical or stepped (:meth:`Param.grid_values`); more than
        ``limit`` points is a :class:`UserError` (a grid that large is a job for a sampler).
        """
        points: list[dict[str, Any]] = []

        def walk(i: int, values: dict[str, Any], named: dict[str, Any]) -> None:
            if len(points) > limit:
                raise UserError(
                    f"space {self.name!r} has more than {limit:,} grid points; fix more settings "
                    "with --set or search it with a sampler (--sampler tpe)"
                )
            if i == len(self._params):
                points.append(dict(named))
                return
            p = self._params[i]
            if not p.is_active(values):
                walk(i + 1, values, named)
                return
            for value in p.grid_values():
                walk(i + 1, {**values, p.key: value}, {**named, p.optuna_name: value})

        walk(0, {}, {})
        return points

    def grid_sample(self, count: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """``count`` grid points covering every value of every parameter as evenly as ``count``
        allows (a seeded subset; :func:`dmlsearch.spaces._grid.cover_evenly`); the whole grid
        when ``count`` is not smaller."""
        return cover_evenly(self.grid_points(), count, seed=seed)

    def sample_points(self, count: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """``count`` configurations in Optuna names spread over the space (a scrambled Sobol
        sample, seeded; :mod:`dmlsearch.spaces._design`): what a learning-curve table over a
        continuous space records."""
        return sobol_points(self._params, count, seed=seed)

    def warm_starts(self) -> list[dict[str, Any]]:
        """The warm-start points in Optuna names, for ``OptunaSearch(points_to_evaluate=...)``.

        A point lists only params that are (or may be, when it leaves their condition to the
        sampler) active at that point; fixed keys are not listed.
        """
        out: list[dict[str, Any]] = []
        for point in self._points:
            named = self.named(point)
            if named and named not in out:
                out.append(named)
        return out

    def named(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """A point in setting keys (``loss.margin``) in Optuna names (``loss.margin[...]``):
        the params active (or possibly active) at the point that it sets, values snapped."""
        states = branch_states(self._params, self._base, point)
        return {p.optuna_name: p.snap(point[p.key])
                for p, state in zip(self._params, states) if state is not False and p.key in point}

    def points(self) -> tuple[dict[str, Any], ...]:
        """The warm starts in setting keys (the declared ones a user's settings left)."""
        return tuple(dict(p) for p in self._points)

    def default_config(self) -> dict[str, Any]:
        """A representative full flat config (config keys): base + each active param's value in
        the first warm start, else its first choice / low bound."""
        first = self._points[0] if self._points else {}
        config = dict(self._base)
        for p in self._params:
            if p.is_active(config):
                value = first.get(p.key, p.default())
                config[p.key] = p.snap(value) if p.contains(value) else p.default()
        return config

    def _filter_points(self) -> tuple[dict[str, Any], ...]:
        """Declared points without fixed keys.

        A point that contradicts an override of a *branch selector* (a key some ``when`` tests,
        e.g. ``loss``) belongs to a branch that no longer exists and is dropped; an override of
        any other key (e.g. ``embedding_size``) just removes that key from the point, which keeps
        the rest of it (e.g. a loss's published defaults) as a warm start.
        """
        selectors = {k for p in self._declared_params for k, _ in p.when}
        points: list[dict[str, Any]] = []
        for point in self._declared_points:
            if any(k in self._overrides and k in selectors
                   and not same_value(v, self._overrides[k]) for k, v in point.items()):
                continue
            rest = {k: v for k, v in point.items() if k not in self._base}
            states = branch_states(self._params, self._base, rest)
            live = {p.key for p, s in zip(self._params, states) if s is not False}
            rest = {k: v for k, v in rest.items() if k in live}
            if rest and rest not in points:
                points.append(rest)
        return tuple(points)

    # -- describing -----------------------------------------------------------------------------

    def describe(self) -> str:
        """A human-readable table of the params, then the base settings and the source."""
        header = ("key", "type", "range / choices", "step/log", "when", "optuna name")
        rows = [
            (p.key, p.kind, p.domain_text(), p.scale_text(), p.when_text(),
             p.optuna_name if p.optuna_name != p.key else "")
            for p in self._params
        ]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

        where = f" ({self.path})" if self.path else ""
        lines = [f"space {self.name}{where}"]
        if self.description:
            lines.append(self.description)
        lines += ["", line(header), line(["-" * w for w in widths])]
        lines += [line(r) for r in rows] or ["(nothing searched)"]
        lines += ["", "base settings:"]
        width = max((len(k) for k in self._base), default=0)
        lines += [f"  {k.ljust(width)} = {format_value(v)}" for k, v in self._base.items()]
        if self._overrides:
            lines.append("overridden: " + ", ".join(sorted(self._overrides)))
        points = self.warm_starts()
        lines += ["", f"warm starts: {len(points)}"]
        lines += ["  " + ", ".join(f"{k}={format_value(v)}" for k, v in pt.items())
                  for pt in points]
        lines += ["", f"source: {self.source}"]
        return "\n".join(lines)
