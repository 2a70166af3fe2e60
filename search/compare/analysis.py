"""A comparison's statistics, computed once: per method and metric the mean and 95% interval
over the retrain seeds, the ranking by the main metric with its rank groups, and every pair of
methods on every reported metric (:mod:`.stats` has the tests and Holm's correction).

The reported test metrics are the thesis's (Psomas 2020, ch. 4, and MLRC): Recall@1/2/4/8
(CUB200, CARS196 and every other dataset) or Recall@1/10/100/1000 (SOP), with the MLRC metrics
P@1, R-Precision and MAP@R (Musgrave et al. 2020), and the comparison's own metric when it is
none of these.
"""

from __future__ import annotations

import dataclasses

from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.stats import TESTS
from dmlsearch.search.compare.stats import MeanCI
from dmlsearch.search.compare.stats import MethodRank
from dmlsearch.search.compare.stats import PairTest
from dmlsearch.search.compare.stats import all_pairs
from dmlsearch.search.compare.stats import mean_ci
from dmlsearch.search.compare.stats import method_values
from dmlsearch.search.compare.stats import rank_methods
from dmlsearch.trainables.metrics.names import metric_mode

__all__ = ["MLRC_METRICS", "SOP_KS", "THESIS_KS", "Analysis", "analyse", "metric_label",
           "mode_of", "reported_metrics"]

SOP_KS: tuple[int, ...] = (1, 10, 100, 1000)
THESIS_KS: tuple[int, ...] = (1, 2, 4, 8)
MLRC_METRICS: tuple[str, ...] = ("precision@1", "r_precision", "map@r")
_LABELS = {"precision@1": "P@1", "r_precision": "R-Precision", "map@r": "MAP@R"}


@dataclasses.dataclass(frozen=True)
class Analysis:
    """Everything the report shows, computed once from a comparison."""

    comparison: Comparison
    seeds: list[int]  # the seeds every method was retrained with (differences pair by them)
    metrics: list[str]  # the reported metrics (see reported_metrics)
    values: dict[str, dict[str, list[float]]]  # method -> metric -> value per seed
    stats: dict[str, dict[str, MeanCI]]  # method -> metric -> mean and 95% interval
    ranking: list[MethodRank]  # by the main metric; methods without it are not ranked
    pairs: list[PairTest]  # every pair on every reported metric both have; Holm per metric
    test: str  # "t" or "permutation"

    def rank_of(self, method: str) -> MethodRank | None:
        return next((r for r in self.ranking if r.method == method), None)

    def mode_of(self, metric: str) -> str:
        return mode_of(self.comparison, metric)


def reported_metrics(dataset: str, metric: str) -> list[str]:
    """The thesis's test metrics for ``dataset``: Recall@1/10/100/1000 for SOP (``sop``),
    Recall@1/2/4/8 for the others, then P@1, R-Precision and MAP@R; ``metric`` (the
    comparison's own) first when it is none of these."""
    ks = SOP_KS if dataset.lower() == "sop" else THESIS_KS
    out = [f"recall@{k}" for k in ks] + list(MLRC_METRICS)
    return out if metric in out else [metric, *out]


def metric_label(metric: str) -> str:
    """``R@1``, ``P@1``, ``R-Precision``, ``MAP@R``; other names as they are."""
    if metric.startswith("recall@"):
        return "R@" + metric.split("@", 1)[1]
    return _LABELS.get(metric, metric)


def analyse(comparison: Comparison, *, test: str = "t", resamples: int = 100_000,
            seed: int = 0) -> Analysis:
    """The comparison's statistics: per method and metric the mean and 95% interval over seeds,
    the ranking by the main metric (``comparison.metric``, in ``comparison.mode``) with its rank
    groups, and every pair of methods for every reported metric (``test``: ``"t"``, the paired
    t-test, or ``"permutation"``; Holm over the pairs of each metric). Methods with test metrics
    must share their seeds, in the same order (ValueError if not)."""
    if test not in TESTS:
        raise ValueError(f"test must be one of {', '.join(TESTS)}; got {test!r}")
    names = [m.name for m in comparison.methods]
    if len(set(names)) != len(names):
        raise ValueError(f"method names must differ: {names}")
    tested = [m for m in comparison.methods if m.test_metrics]
    seeds = list(tested[0].seeds) if tested else []
    for m in tested:
        if list(m.seeds) != seeds:
            raise ValueError(f"the methods were retrained with different seeds: "
                             f"{tested[0].name} {seeds}, {m.name} {list(m.seeds)} (differences "
                             "pair by seed: every method needs the same seeds, in the same order)")
    metrics = reported_metrics(comparison.dataset, comparison.metric)
    values: dict[str, dict[str, list[float]]] = {}
    for m in comparison.methods:
        keys = dict.fromkeys(k for t in m.test_metrics for k in t)
        found = {k: method_values(m, k) for k in keys}
        values[m.name] = {k: v for k, v in found.items() if v is not None}
    stats = {name: {k: mean_ci(v) for k, v in per.items()} for name, per in values.items()}
    pairs: list[PairTest] = []
    for metric in metrics:
        have = {name: per[metric] for name, per in values.items() if metric in per}
        pairs += all_pairs(have, {name: seeds for name in have}, metric=metric, test=test,
                           resamples=resamples, seed=seed)
    main = comparison.metric
    ranking = rank_methods({name: s[main] for name, s in stats.items() if main in s},
                           [p for p in pairs if p.metric == main], mode=comparison.mode)
    return Analysis(comparison=comparison, seeds=seeds, metrics=metrics, values=values,
                    stats=stats, ranking=ranking, pairs=pairs, test=test)


def mode_of(comparison: Comparison, metric: str) -> str:
    """Whether ``metric`` is maximised or minimised in this comparison."""
    if metric == comparison.metric:
        return comparison.mode
    try:
        return metric_mode(metric)
    except ValueError:  # not a metric dmlsearch computes: higher is better, as retrieval's
        return "max"
