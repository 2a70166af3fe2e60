"""A grid study capped below its size: which points to run.

``--sampler grid --trials N`` with N below the grid's size runs a seeded subset of N points that
covers every value of every parameter as evenly as N allows (the first N points in file order
would cover only the first losses of a benchmark grid). Parameters whose value follows from the
others' (a batch size set per backbone, a batch sampler per loss) are not balanced on their own:
they follow. Greedy, one point at a time: the point that brings the most values not yet covered,
then the one whose values are the least used so far (mean count), then the least used value
(max count), ties broken by a seeded random order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["cover_evenly"]


def cover_evenly(points: Sequence[dict[str, Any]], count: int, *, seed: int = 0
                 ) -> list[dict[str, Any]]:
    """``count`` of ``points`` (dicts of parameter → value; a conditional parameter is absent
    from the points outside its branch) covering every (parameter, value) as evenly as
    ``count`` allows; in the order chosen. All of them when ``count`` is not smaller."""
    if count >= len(points):
        return list(points)
    order = random.Random(seed).sample(range(len(points)), len(points))
    shuffled = [points[i] for i in order]
    free = _free_parameters(shuffled)
    pairs: dict[tuple[str, str], int] = {}
    rows = [[pairs.setdefault((k, repr(p[k])), len(pairs)) for k in sorted(p) if k in free]
            for p in shuffled]
    width = max(1, max(len(r) for r in rows))
    ids = np.full((len(rows), width), len(pairs), dtype=np.int64)  # len(pairs): no value
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
    present = ids < len(pairs)
    sizes = np.maximum(present.sum(axis=1), 1)
    counts = np.zeros(len(pairs) + 1, dtype=np.int64)
    available = np.ones(len(rows), dtype=bool)
    chosen = []
    for _ in range(count):
        seen = np.where(present, counts[ids], 0)
        new = ((seen == 0) & present).sum(axis=1)
        mean = seen.sum(axis=1) / sizes
        worst = seen.max(axis=1)
        # lexicographic: most new values, then least used on average, then least used at most;
        # np.lexsort sorts by its last key first, and its order is stable (the seeded order).
        candidates = np.flatnonzero(available)
        ranked = np.lexsort((worst[candidates], mean[candidates], -new[candidates]))
        pick = int(candidates[ranked[0]])
        available[pick] = False
        counts[ids[pick][present[pick]]] += 1
        chosen.append(shuffled[pick])
    return chosen


def _free_parameters(points: Sequence[dict[str, Any]]) -> set[str]:
    """The parameters whose value does not follow from the other parameters' values."""
    names = sorted({k for p in points for k in p})
    free = set()
    for name in names:
        seen: dict[tuple[Any, ...], str] = {}
        for p in points:
            if name not in p:
                continue
            rest = tuple((k, repr(v)) for k, v in sorted(p.items()) if k != name)
            value = repr(p[name])
            if seen.setdefault(rest, value) != value:
                free.add(name)
                break
    return free
