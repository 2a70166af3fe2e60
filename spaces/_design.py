"""A space-filling sample of a space: the configurations a learning-curve table over a
continuous space records (``dmlsearch record-curves --sample N``).

A scrambled Sobol sequence (``scipy.stats.qmc.Sobol``, seeded) in the unit cube with one
dimension per declared param, mapped through each param's domain (:func:`from_unit`): a
categorical's choices take equal shares of [0, 1), a range is uniform in its own scale (log for a
``log`` range), snapped to its step. A conditional param reads its own dimension only where its
branch is active, so every branch is itself a Sobol sample of its params. A prefix of the
sequence is itself well spread: a recording cut short is still a usable sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dmlsearch.spaces._params import Param

__all__ = ["from_unit", "sobol_points"]


def from_unit(param: Param, u: float) -> Any:
    """The value of ``param`` at ``u`` in [0, 1) (see the module docstring)."""
    u = min(max(float(u), 0.0), math.nextafter(1.0, 0.0))
    if param.kind == "categorical":
        return param.choices[int(u * len(param.choices))]
    assert param.low is not None and param.high is not None
    low, high = float(param.low), float(param.high)
    if param.kind == "int" or param.step is not None:
        # equal shares of [0, 1) for every value of a stepped or integer range
        values = param.grid_values() if param.step is not None else list(
            range(int(low), int(high) + 1))
        if param.log and param.step is None:  # log-scaled integers: uniform in log
            value = math.exp(math.log(low) + u * (math.log(high + 1) - math.log(low)))
            return param.snap(min(int(value), int(high)))
        return param.snap(values[int(u * len(values))])
    if param.log:
        return param.snap(math.exp(math.log(low) + u * (math.log(high) - math.log(low))))
    return param.snap(low + u * (high - low))


def sobol_points(params: Sequence[Param], count: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` configurations (Optuna names → values) of ``params`` (resolved, in sampling
    order), from a scrambled Sobol sequence seeded by ``seed``."""
    from scipy.stats import qmc

    if count <= 0 or not params:
        return []
    exponent = max(1, math.ceil(math.log2(count)))
    cube = qmc.Sobol(d=len(params), scramble=True, seed=seed).random_base2(exponent)[:count]
    points = []
    for row in cube:
        values: dict[str, Any] = {}
        named: dict[str, Any] = {}
        for param, u in zip(params, row):
            if param.is_active(values):
                value = from_unit(param, u)
                values[param.key] = value
                named[param.optuna_name] = value
        points.append(named)
    return points
