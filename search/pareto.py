"""The Pareto front of a multi-objective search (``dmlsearch run --pareto COST``).

A point is on the front when no other point is at least as good in every objective and strictly
better in one. Objectives are maximised or minimised each by its own mode.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["dominates", "pareto_front"]


def _better_or_equal(a: float, b: float, mode: str) -> bool:
    return a >= b if mode == "max" else a <= b


def dominates(a: Sequence[float], b: Sequence[float], modes: Sequence[str]) -> bool:
    """Whether ``a`` is at least as good as ``b`` in every objective and better in one."""
    if not all(_better_or_equal(x, y, m) for x, y, m in zip(a, b, modes, strict=True)):
        return False
    return any(x != y for x, y in zip(a, b))


def pareto_front(points: Sequence[Sequence[float]], modes: Sequence[str]) -> list[int]:
    """Indices of the non-dominated ``points``, sorted best-first by the first objective.

    Equal points are all kept (none dominates the other). O(n²): a search has hundreds of
    trials, not millions.
    """
    if any(m not in ("max", "min") for m in modes):
        raise ValueError(f"modes must be 'max' or 'min', got {list(modes)}")
    front = [i for i, p in enumerate(points)
             if not any(dominates(q, p, modes) for j, q in enumerate(points) if j != i)]
    sign = -1.0 if modes[0] == "max" else 1.0
    return sorted(front, key=lambda i: (sign * points[i][0], i))
