"""Which curve of a table a configuration replays, and which spaces a table answers.

A grid table: the search space a table is replayed with may be finer than the grid (a
continuous learning rate over the grid's range); each searched value is snapped to the nearest
value the table holds for that setting (in log scale for positive values spanning a factor of 10
or more, else linearly), within the branch the categorical values pick; categorical values must
be in the table; and the table's seed is the trial's ``seed`` when it was recorded, else the
first recorded one.

A sampled table (``record-curves --sample``, a spread sample of a space with continuous
ranges): the curve a surrogate fitted on the table predicts for the configuration
(:mod:`.surrogate`); the same for every seed.

A replay with training noise (issue 36) draws one of the point's recorded seeds, or
the curve with noise fitted to the table's seed-to-seed spread, drawn for the trial
(:mod:`.noise`); without it (every caller by default), the curve above, as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dmlsearch.search.replay.table import Curve
from dmlsearch.search.replay.table import CurveTable
from dmlsearch.search.replay.table import config_key
from dmlsearch.spaces import Space
from dmlsearch.trainables.errors import UserError

__all__ = ["check_space", "lookup", "snap"]

# Settings a table's fixed base may differ in from a space's: where the data and the work live.
_WHERE_NOT_WHAT = ("data_root", "workers", "threads", "device", "seed")


def lookup(table: CurveTable, config: Mapping[str, Any]) -> Curve:
    """The curve ``config`` replays: its grid point (:func:`snap`), and its seed's training
    when the table has one, else the first seed recorded for that point; in a sampled table,
    the surrogate's curve. With training noise: :func:`.noise.replay_curve`."""
    if table.sampled:
        from dmlsearch.search.replay.surrogate import surrogate_for

        return surrogate_for(table).curve(config)
    key = config_key(snap(table, config))
    seeds = sorted(seed for k, seed in table.curves if k == key)
    seed = int(config.get("seed", seeds[0])) if seeds else 0
    return table.curves[(key, seed if seed in seeds else seeds[0])]


def snap(table: CurveTable, config: Mapping[str, Any]) -> dict[str, Any]:
    """The grid point nearest to ``config``'s values of the grid's settings."""
    candidates = table.configs()
    point: dict[str, Any] = {}
    keys = [k for k in table.keys() if k in config]
    # categorical settings first: they pick the branch (a loss's own parameters)
    keys.sort(key=lambda k: _is_number(config[k]))
    for key in keys:
        options = {repr(c[key]): c[key] for c in candidates if key in c}
        if not options:
            continue
        value = _nearest(config[key], list(options.values()))
        if value is None:
            raise UserError(
                f"the replay table {table.path.name} has no {key}={config[key]!r} (it holds "
                f"{sorted(map(str, options.values()))}); replay a space whose values the "
                "table covers")
        point[key] = value
        candidates = [c for c in candidates if key not in c or c[key] == value]
    missing = [k for c in candidates[:1] for k in c if k not in point]
    if not candidates or missing:
        raise UserError(f"the replay table {table.path.name} has no configuration for "
                        f"{dict(config)} (missing settings: {missing})")
    return candidates[0]


def check_space(table: CurveTable, space: Space) -> None:
    """A space replays ``table`` when its fixed settings agree with the table's, every setting
    it searches is one the table varies, and every categorical choice (within its own branch)
    is in the table; else a :class:`UserError` that says which and how to fix it."""
    recorded = table.base
    for key, value in space.base.items():
        if key in recorded and key not in _WHERE_NOT_WHAT and recorded[key] != value:
            raise UserError(
                f"the replay table {table.path.name} was recorded with {key}={recorded[key]!r},"
                f" but the space sets {key}={value!r}; replay a space with the table's "
                f"settings (e.g. --set {key}={recorded[key]})")
    grid = table.grid()
    unknown = [p.key for p in space.params if p.key not in grid]
    if unknown:
        raise UserError(f"the space searches {unknown}, which the replay table "
                        f"{table.path.name} does not vary (it varies {sorted(grid)}); search "
                        "only those settings in a replay")
    if table.sampled:
        _check_ranges(table, space)
        return
    for param in space.params:
        for choice in param.choices or ():
            snap(table, {**space.default_config(), **{k: v[0] for k, v in param.when},
                         param.key: choice})


def _check_ranges(table: CurveTable, space: Space) -> None:
    """A sampled table answers a space whose ranges lie within the values it recorded (its
    surrogate does not extrapolate) and whose choices it recorded, in each branch."""
    from dmlsearch.search.replay.surrogate import surrogate_for

    surrogate = surrogate_for(table)
    for param in space.params:
        branches = [b for b in surrogate.branches if param.key in b.keys and all(
            str(v[0]) in b.fixed.get(k, [str(v[0])]) for k, v in param.when)]
        values = [c.config[param.key] for b in branches for c in b.curves]
        if param.choices:
            missing = [c for c in param.choices if c not in values
                       and not (_is_number(c) and values and all(map(_is_number, values))
                                and min(values) <= c <= max(values))]
            if missing:
                raise UserError(f"the replay table {table.path.name} recorded no "
                                f"{param.optuna_name} = {missing}; replay a space whose choices "
                                "the table covers")
            continue
        low, high = float(param.low), float(param.high)  # type: ignore[arg-type]
        scale = math.log if param.log and low > 0 and min(values, default=0) > 0 else float
        lowest, highest = (min(values), max(values)) if values else (math.nan, math.nan)
        # a sample leaves gaps at the edges: 2% of the recorded range (in the param's scale)
        slack = 0.02 * (scale(highest) - scale(lowest)) if values else 0.0
        if (not values or scale(low) < scale(lowest) - slack
                or scale(high) > scale(highest) + slack):
            held = f"[{lowest:g}, {highest:g}]" if values else "no values"
            raise UserError(f"the space searches {param.optuna_name} over [{low:g}, {high:g}], "
                            f"but the replay table {table.path.name} recorded {held}; a "
                            "surrogate does not extrapolate: narrow the range to the table's")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _nearest(value: Any, options: list[Any]) -> Any:
    if not _is_number(value) or not all(_is_number(o) for o in options):
        return value if value in options else None
    log = all(o > 0 for o in options) and value > 0 and max(options) >= 10 * min(options)

    def distance(option: float) -> float:
        return abs(math.log(option) - math.log(value)) if log else abs(option - value)

    return min(options, key=distance)
