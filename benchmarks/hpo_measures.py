"""The measures the HPO field reports for search methods on benchmark tables, as pure functions
of each search's trial results in order (used by ``benchmarks/search_efficiency.py``, tested in
``tests/benchmarks``).

A search is its *events*: one per epoch any of its trials trained, in the order the driver heard
them: ``(score, finished)``, the trial's best validation score so far and whether the trial
trained to its end there. Its budget is counted in full-training equivalents: epochs trained /
epochs of one full training.

- **incumbent**: the best score of the trials that trained to their end so far (a stopped
  trial's score is of fewer epochs: not comparable, as in multi-fidelity benchmarks);
- **judged** values (a replay with training noise, issue 36): the incumbent is still the trial
  the search saw score best (its noisy score), but its quality is judged by another value given
  per finished trial (the noiseless, seed-mean score of its configuration): what a user who
  retrains the search's choice gets, not the lucky draw that made it the choice;
- **normalised regret** (YAHPO Gym): (best − incumbent) / (best − worst), best and worst of the
  table; 1 before any trial trained to its end; clipped to [0, 1];
- **mean and bootstrap 95% interval** over seeds (percentile bootstrap, seeded);
- **average rank** per budget of methods within each seed (ties share their mean rank) and
  **Friedman's test** that all methods rank alike (``scipy.stats.friedmanchisquare``; seeds,
  or tables × seeds, as blocks), and the **Nemenyi critical difference**: two methods' average
  ranks over n blocks differ significantly (α = 0.05, all pairs) when they differ by more than
  q_α √(k(k+1) / 6n), q_α the studentized range's quantile / √2 (Demšar 2006);
- **epochs to a target**: epochs trained when the incumbent first reaches the target (its
  judged value, when given); without judged values, when the first trial that trained to its
  end at or above the target finishes (inf: never within the budget).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

__all__ = ["average_ranks", "best_at", "bootstrap_mean", "epochs_to_target", "friedman",
           "incumbent_at", "nemenyi_cd", "nemenyi_q", "quantiles", "regret", "regret_curve",
           "trajectory"]

Event = Sequence[Any]  # (score or None, finished: bool/int)


def trajectory(events: Sequence[Event], mode: str = "max",
               judged: Sequence[float] | None = None) -> list[tuple[int, float]]:
    """(epochs trained, incumbent) at each change of the incumbent; with ``judged`` (one value
    per finished event, in order), the incumbent's judged value instead of its score."""
    best, points, finished_count = None, [], 0
    for n, (score, finished) in enumerate(events, 1):
        if finished:
            finished_count += 1
        if finished and score is not None and (
                best is None or (score > best if mode == "max" else score < best)):
            best = score
            points.append((n, score if judged is None else judged[finished_count - 1]))
    return points


def best_at(points: Sequence[tuple[int, float]], epochs: float) -> float | None:
    """The incumbent of a trajectory after ``epochs`` epochs (None: no trial finished yet)."""
    value = None
    for n, score in points:
        if n > epochs:
            break
        value = score
    return value


def incumbent_at(events: Sequence[Event], epochs: float, mode: str = "max") -> float | None:
    return best_at(trajectory(events, mode), epochs)


def epochs_to_target(events: Sequence[Event], target: float, mode: str = "max",
                     judged: Sequence[float] | None = None) -> float:
    """Epochs trained when the incumbent first reaches ``target`` (its ``judged`` value when
    given: :func:`trajectory`), i.e. without them when the first trial that trained to its end
    with a score at ``target`` finishes; inf when it never does."""
    for n, value in trajectory(events, mode, judged):
        if value >= target if mode == "max" else value <= target:
            return float(n)
    return math.inf


def regret(incumbent: float | None, best: float, worst: float, mode: str = "max") -> float:
    """YAHPO's normalised regret of ``incumbent`` on a table whose best and worst scores are
    ``best`` and ``worst``: 0 at the best, 1 at the worst or before any incumbent."""
    if incumbent is None or best == worst:
        return 1.0 if incumbent is None else 0.0
    gap = (best - incumbent) if mode == "max" else (incumbent - best)
    return min(1.0, max(0.0, gap / abs(best - worst)))


def regret_curve(events: Sequence[Event], budgets: Sequence[float], *, best: float,
                 worst: float, mode: str = "max",
                 judged: Sequence[float] | None = None) -> list[float]:
    """The normalised regret after each of ``budgets`` epochs (of the incumbent's ``judged``
    value when given: :func:`trajectory`)."""
    points = trajectory(events, mode, judged)
    return [regret(best_at(points, b), best, worst, mode) for b in budgets]


def bootstrap_mean(values: Sequence[float], *, resamples: int = 10_000, seed: int = 0,
                   level: float = 0.95) -> dict[str, float]:
    """The mean of ``values`` and its percentile-bootstrap interval."""
    import numpy as np

    n = len(values)
    if n == 0:
        return {"mean": math.nan, "low": math.nan, "high": math.nan}
    data = np.asarray(values, dtype=float)
    picks = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    means = data[picks].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return {"mean": float(data.mean()), "low": float(low), "high": float(high)}


def quantiles(values: Sequence[float]) -> tuple[float, float, float]:
    """Median and quartiles (inf allowed: not reached), interpolated in the sorted order."""
    ordered = sorted(values)

    def at(q: float) -> float:
        position = q * (len(ordered) - 1)
        low, high = math.floor(position), math.ceil(position)
        if math.isinf(ordered[low]) or math.isinf(ordered[high]):
            return ordered[high]
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return at(0.5), at(0.25), at(0.75)


def average_ranks(blocks: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each method's mean rank (1 = lowest value, ties sharing their mean rank) over
    ``blocks``, each a {method: value} with the same methods."""
    from scipy.stats import rankdata

    if not blocks:
        return {}
    methods = list(blocks[0])
    totals = dict.fromkeys(methods, 0.0)
    for block in blocks:
        for method, rank in zip(methods, rankdata([block[m] for m in methods])):
            totals[method] += float(rank)
    return {m: totals[m] / len(blocks) for m in methods}


def friedman(blocks: Sequence[Mapping[str, float]]) -> dict[str, float | None]:
    """Friedman's χ² and p-value that every method ranks alike over ``blocks`` (None with
    fewer than 3 methods or 2 blocks, or when every block is all ties)."""
    from scipy.stats import friedmanchisquare

    if len(blocks) < 2 or len(blocks[0]) < 3:
        return {"statistic": None, "p_value": None}
    methods = list(blocks[0])
    columns = [[block[m] for block in blocks] for m in methods]
    if all(len(set(block.values())) == 1 for block in blocks):
        return {"statistic": None, "p_value": None}
    result = friedmanchisquare(*columns)
    return {"statistic": float(result.statistic), "p_value": float(result.pvalue)}


def nemenyi_q(k: int, alpha: float = 0.05) -> float:
    """Nemenyi's q_α for ``k`` methods: the studentized range's upper-α quantile with k groups
    and infinite degrees of freedom, divided by √2 (Demšar 2006, Table 5a: 2.343 for k = 3,
    3.102 for k = 9)."""
    import numpy as np
    from scipy.stats import studentized_range

    if k < 2:
        raise ValueError(f"the Nemenyi test compares at least 2 methods, got {k}")
    return float(studentized_range.ppf(1 - alpha, k, np.inf)) / math.sqrt(2)


def nemenyi_cd(k: int, n: int, alpha: float = 0.05) -> float:
    """The Nemenyi critical difference of average ranks for ``k`` methods over ``n`` blocks
    (seeds): q_α √(k(k+1) / 6n)."""
    if n < 1:
        raise ValueError(f"the critical difference needs at least one block, got {n}")
    return nemenyi_q(k, alpha) * math.sqrt(k * (k + 1) / (6 * n))
