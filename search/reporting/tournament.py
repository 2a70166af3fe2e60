"""The thesis's "Tournament" (Psomas 2020, Table 11): losses ranked within each
experiment (one combination of the other searched parameters, e.g. backbone x embedding size),
then by their average rank over the experiments. Pure functions of rows of numbers."""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

__all__ = ["experiment_keys", "hashable", "tournament"]


def tournament(rows: Iterable[Mapping[str, Any]], *, group_keys: Sequence[str], item_key: str,
               score_key: str, mode: str) -> list[dict[str, Any]]:
    """Rank items (losses) within each group (experiment), then aggregate their ranks.

    ``rows`` are flat mappings; a group is one combination of the values of ``group_keys``.
    Within a group, items are ranked by ``score_key`` (``mode`` "max": highest is rank 1; "min":
    lowest is rank 1); tied items share the average of the ranks they span (1 and 2 -> 1.5 each).
    Rows without a finite score are ignored; an item with several rows in a group counts once,
    with its best score; a group with fewer than two scored items ranks nothing and is skipped.

    Returns one dict per item: ``item``, ``experiments`` (groups it was ranked in), ``ranks``
    (its rank in each, in group order), ``sum``, ``mean`` and ``std`` (population std, ddof 0) of
    its ranks; sorted by mean rank, then by more experiments, then by name.
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    better = max if mode == "max" else min
    groups: dict[tuple[Any, ...], dict[Any, float]] = {}
    for row in rows:
        score = row.get(score_key)
        if score is None or not isinstance(score, (int, float)) or not math.isfinite(score):
            continue
        group = tuple(hashable(row.get(k)) for k in group_keys)
        item = row.get(item_key)
        scores = groups.setdefault(group, {})
        scores[item] = better(scores[item], float(score)) if item in scores else float(score)
    ranks: dict[Any, list[float]] = {}
    for scores in groups.values():
        if len(scores) < 2:
            continue
        for item, score in scores.items():
            ahead = sum(1 for s in scores.values() if (s > score if mode == "max" else s < score))
            tied = sum(1 for s in scores.values() if s == score)  # itself included
            ranks.setdefault(item, []).append(ahead + (tied + 1) / 2)
    table = []
    for item, values in ranks.items():
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        table.append({"item": item, "experiments": len(values), "ranks": values,
                      "sum": sum(values), "mean": mean, "std": std})
    table.sort(key=lambda r: (r["mean"], -r["experiments"], str(r["item"])))
    return table


def hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, hashable(v)) for k, v in value.items()))
    return value


def experiment_keys(configs: Sequence[Mapping[str, Any]], searched: Sequence[str],
                    item_key: str = "loss") -> list[str]:
    """The searched keys that define an experiment: all but ``item_key``, its own parameters
    (``loss.*``) and keys whose value follows from the item (a ``when: {loss: ...}`` branch, such
    as the sampler each loss needs): those would put every loss in an experiment of its own."""
    keys = []
    for key in dict.fromkeys(searched):
        if key == item_key or key.startswith(item_key + "."):
            continue
        values = {hashable(c.get(key)) for c in configs}
        by_item: dict[Any, set[Any]] = {}
        for c in configs:
            by_item.setdefault(hashable(c.get(item_key)), set()).add(hashable(c.get(key)))
        if len(values) > 1 and all(len(v) == 1 for v in by_item.values()):
            continue
        keys.append(key)
    return keys
