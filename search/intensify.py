"""Intensification (``--intensify K``): before the retrain, the K best configurations train once
more with another seed, on the same training and validation classes, and the pick is the best
mean of the two.

Why: one training's best validation score varies with its seed (σ ≈ 0.02-0.03 MAP@R on the
project's learning-curve tables, docs/benchmarks.md), about as much as the search's best few
configurations differ; the search's best single score is then partly luck (the winner's curse).
A second seed of the best few, as SMAC's intensification does (Hutter et al., LION 2011), makes
the pick the configuration that is good, not the one that was lucky. The second fits are paid
from the search's own budget: ``--trials N`` keeps K trainings' worth of epochs for them, so a
search with intensification trains no more than one without.

What a person reads: each configuration's two scores and their mean, which one is picked, and,
when the two best means differ by less than the seed-to-seed spread measured on these pairs
allows to tell apart (two standard errors of a difference of two-seed means), that they cannot
be told apart. A second fit that fails leaves its configuration with its first score, said so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

from dmlsearch.search.results import TrialRecord

__all__ = ["SECOND_SEED", "Intensified", "intensify", "seed_spread", "told_apart"]

SECOND_SEED = 1  # the second fit's seed: the trial's seed + this


@dataclasses.dataclass(frozen=True)
class Intensified:
    """One configuration's two fits: its trial, the seeds and the scores (a failed second fit:
    its reason, and one score)."""

    trial_id: str
    name: str  # t07
    seeds: list[int]
    scores: list[float]
    reason: str | None = None  # why the second fit failed

    @property
    def mean(self) -> float:
        return float(sum(self.scores) / len(self.scores))

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "mean": self.mean}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Intensified:
        return cls(**{k: v for k, v in body.items() if k != "mean"})


def intensify(ranked: Sequence[TrialRecord], *, top: int, mode: str,
              fit: Callable[[dict[str, Any]], float]) -> list[Intensified]:
    """The ``top`` best of ``ranked`` (trials trained to their end, best first), each with a
    second fit (``fit``: a configuration -> its best validation score; it raises on a failed
    training), best mean first in the metric's direction ``mode``."""
    out: list[Intensified] = []
    for record in ranked[:top]:
        seed = int(record.config.get("seed", 0))
        second = seed + SECOND_SEED
        try:
            score = float(fit({**record.config, "seed": second}))
            if not math.isfinite(score):
                raise ValueError(f"its score was {score}")
        except Exception as exc:  # noqa: BLE001 - a failed fit fails alone (its reason kept)
            out.append(Intensified(record.trial_id, record.name, [seed],
                                   [float(record.score or 0.0)],
                                   reason=f"{type(exc).__name__}: {exc}"[:500]))
            continue
        out.append(Intensified(record.trial_id, record.name, [seed, second],
                               [float(record.score or 0.0), score]))
    sign = -1.0 if mode == "max" else 1.0
    return sorted(out, key=lambda i: sign * i.mean)


def seed_spread(fits: Sequence[Intensified]) -> float | None:
    """The seed-to-seed standard deviation of one fit's score, pooled over the configurations
    with two fits (sqrt of the mean of d² / 2); None with none."""
    pairs = [i.scores for i in fits if len(i.scores) == 2]
    if not pairs:
        return None
    return math.sqrt(sum((a - b) ** 2 / 2 for a, b in pairs) / len(pairs))


def told_apart(fits: Sequence[Intensified]) -> bool | None:
    """Whether the best two means differ by more than two standard errors of a difference of
    two-seed means (σ_diff = σ when each mean has two fits); None: fewer than two, or no
    spread measured."""
    if len(fits) < 2:
        return None
    sigma = seed_spread(fits)
    if sigma is None:
        return None
    a, b = fits[0], fits[1]
    se = math.sqrt(sigma ** 2 / len(a.scores) + sigma ** 2 / len(b.scores))
    return abs(a.mean - b.mean) > 2 * se
