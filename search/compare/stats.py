"""The statistics of ``dmlsearch compare``: pure functions of the test metrics of a
:class:`~dmlsearch.search.compare.outcome.Comparison` (NumPy and SciPy only).

What they follow:

- per method, the mean over the retrain seeds and the half-width of the two-sided 95% Student-t
  interval (:func:`dmlsearch.search.results.mean_ci95`, as the search's retrain reports);
- per pair of methods, the differences paired by seed (every method is retrained with the same
  seeds, so seed ``s`` of method a and seed ``s`` of method b share their data order and
  initialisation), their mean, the 95% t interval of the mean difference, and a two-sided p-value:
  the paired t-test (Student 1908; :func:`scipy.stats.ttest_rel`) by default, or the sign-flip
  permutation test of the mean difference (Fisher 1935; exact over all 2^n sign flips for n <= 16
  seeds, else a seeded Monte-Carlo sample with the +1 correction of Phipson & Smyth 2010, as
  :func:`scipy.stats.permutation_test` with ``permutation_type="samples"`` computes it);
- Holm's step-down correction (Holm 1979) of the p-values of one family (every pair of methods
  for one metric), which controls the family-wise error rate without assuming independence;
- a ranking by mean test metric with groups of methods the data cannot separate
  (:func:`rank_methods`, rule in its docstring).

The thesis's tournament over several comparisons is :mod:`.comparison_md`'s.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from collections.abc import Sequence

import numpy as np

from dmlsearch.search.compare.outcome import MethodOutcome
from dmlsearch.search.results import mean_ci95

__all__ = [
    "ALPHA", "CONSTANT_TOL", "EXACT_MAX_SEEDS", "TESTS", "MeanCI", "MethodRank", "PairTest",
    "all_pairs", "holm", "mean_ci", "method_values", "paired_differences",
    "paired_test", "rank_methods", "sign_flip_pvalue", "verdict",
]

ALPHA = 0.05
"""The level of every test and interval: 95% intervals, "separable" at Holm p < 0.05."""
TESTS: dict[str, str] = {"t": "paired t", "permutation": "permutation"}
"""The paired tests by option name (``test=``), and the name the report gives each."""
CONSTANT_TOL = 1e-12
"""Differences that spread less than this are one constant (their t statistic is 0/0 or ±inf;
SciPy would warn of catastrophic cancellation and return noise)."""
EXACT_MAX_SEEDS = 16
"""Up to this many seeds the sign-flip test enumerates all 2^n flips (65,536 at 16)."""


@dataclasses.dataclass(frozen=True)
class MeanCI:
    """The mean of ``n`` values and the half-width of its 95% Student-t interval (None for one
    value: one seed has no spread to estimate)."""

    mean: float
    half_width: float | None
    n: int

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width


@dataclasses.dataclass(frozen=True)
class PairTest:
    """Method ``a`` against method ``b`` on ``metric``: differences a - b paired by seed."""

    a: str
    b: str
    metric: str
    n: int  # the number of paired seeds
    diff: float  # the mean of the differences a - b
    ci95: tuple[float, float] | None  # the 95% t interval of the mean difference (n >= 2)
    p: float | None  # two-sided p-value of ``test`` (None with fewer than 2 seeds: see note)
    test: str  # "paired t" or "permutation"
    p_holm: float | None = None  # p after Holm's correction over its family (see all_pairs)
    note: str | None = None  # why there is no p-value, or how it was computed


@dataclasses.dataclass(frozen=True)
class MethodRank:
    """A method's place in the ranking of one metric (see :func:`rank_methods`)."""

    method: str
    mean: float
    half_width: float | None
    rank: int  # 1-based, by mean (best first; equal means by name)
    group: int  # 1-based; the methods of a group cannot be separated from its leader
    leader: str  # the group's best method (its first by rank)
    tied: bool  # the group has other members


def mean_ci(values: Sequence[float]) -> MeanCI:
    """Mean and half-width of the 95% Student-t interval over seeds (t with n - 1 degrees of
    freedom, the sample standard deviation with ddof 1); ``mean_ci95`` of the retrain."""
    if len(values) == 0:
        raise ValueError("mean_ci: no values")
    mean, half = mean_ci95(values)
    return MeanCI(mean=mean, half_width=half if len(values) >= 2 else None, n=len(values))


def method_values(method: MethodOutcome, metric: str) -> list[float] | None:
    """The method's test ``metric`` per seed, in ``seeds`` order, or None when a seed lacks it
    (or its value is not finite): such a method has no mean for that metric."""
    if len(method.test_metrics) != len(method.seeds):
        raise ValueError(f"method {method.name!r}: {len(method.test_metrics)} test results for "
                         f"{len(method.seeds)} seeds {list(method.seeds)}")
    if not method.test_metrics:
        return None
    values = []
    for metrics in method.test_metrics:
        value = metrics.get(metric)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
        values.append(float(value))
    return values


def paired_differences(values_a: Sequence[float], values_b: Sequence[float], *,
                       seeds_a: Sequence[int], seeds_b: Sequence[int]) -> np.ndarray:
    """``a - b`` seed by seed; the seeds must be the same, in the same order (ValueError if
    not: unpaired results cannot be compared by seed)."""
    if list(seeds_a) != list(seeds_b):
        raise ValueError(f"paired by seed, but the seeds differ: {list(seeds_a)} vs "
                         f"{list(seeds_b)} (every method must be retrained with the same seeds, "
                         "in the same order)")
    if len(values_a) != len(seeds_a) or len(values_b) != len(seeds_b):
        raise ValueError(f"{len(values_a)} and {len(values_b)} values for {len(seeds_a)} seeds")
    return np.asarray(values_a, dtype=np.float64) - np.asarray(values_b, dtype=np.float64)


def sign_flip_pvalue(diffs: Sequence[float], *, exact_max: int = EXACT_MAX_SEEDS,
                     resamples: int = 100_000, seed: int = 0) -> tuple[float, bool]:
    """Two-sided p-value of the sign-flip permutation test of the mean difference, and whether
    it is exact.

    Under the null hypothesis (no difference between the methods) the sign of each seed's
    difference is as likely + as -. The statistic is the mean difference ``t``; the p-value is the
    share of sign flips whose mean is at least as far from 0 as ``t``: all ``2^n`` flips for
    ``n <= exact_max`` (the observed one among them), else ``resamples`` random flips drawn with
    ``seed``, counted with the observed one, ``(1 + #) / (1 + resamples)`` (Phipson & Smyth
    2010). Means equal to ``|t|`` within a relative 100 machine epsilons count as equal (as
    :func:`scipy.stats.permutation_test`, whose ``2 min(p_less, p_greater)`` equals this share for
    the symmetric exact null)."""
    d = np.asarray(diffs, dtype=np.float64)
    n = len(d)
    if n == 0:
        raise ValueError("sign_flip_pvalue: no differences")
    observed = abs(float(d.mean()))
    gamma = observed * np.finfo(np.float64).eps * 100
    if n <= exact_max:
        flips = np.arange(2**n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)
        signs = 1.0 - 2.0 * (flips & 1)
        null = np.abs(signs @ d) / n
        return float(np.count_nonzero(null >= observed - gamma) / len(null)), True
    rng = np.random.default_rng(seed)
    count = 0
    done = 0
    while done < resamples:
        size = min(10_000, resamples - done)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(size, n))
        count += int(np.count_nonzero(np.abs(signs @ d) / n >= observed - gamma))
        done += size
    return (1 + count) / (1 + resamples), False


def paired_test(values_a: Sequence[float], values_b: Sequence[float], *,
                seeds_a: Sequence[int], seeds_b: Sequence[int], a: str = "a", b: str = "b",
                metric: str = "", test: str = "t", resamples: int = 100_000,
                seed: int = 0) -> PairTest:
    """Method ``a`` against ``b``: the differences a - b paired by seed (see
    :func:`paired_differences`), their mean, its 95% t interval and a two-sided p-value.

    ``test``: ``"t"`` (the paired t-test, :func:`scipy.stats.ttest_rel`) or ``"permutation"``
    (:func:`sign_flip_pvalue`, with ``resamples`` and ``seed`` when Monte-Carlo). With fewer
    than 2 seeds there is neither interval nor p-value (``note`` says so). When every
    difference is the same (within ``CONSTANT_TOL``: rounding), the t statistic is 0/0 or ±inf:
    p is 1 for identical results and 0 (the t-test's limit) for a constant non-zero difference.
    """
    if test not in TESTS:
        raise ValueError(f"test must be one of {', '.join(TESTS)}; got {test!r}")
    d = paired_differences(values_a, values_b, seeds_a=seeds_a, seeds_b=seeds_b)
    n = len(d)
    if n == 0:
        raise ValueError(f"{a} vs {b}: no seeds to pair")
    name = TESTS[test]
    if n < 2:
        return PairTest(a=a, b=b, metric=metric, n=n, diff=float(d.mean()), ci95=None, p=None,
                        test=name, note="1 seed: no interval or test (a paired test needs at "
                                        "least 2 seeds; retrain with --seeds 2 or more)")
    mean, half = mean_ci95(d)
    note = None
    if test == "t":
        if np.ptp(d) <= CONSTANT_TOL:
            p = 1.0 if abs(mean) <= CONSTANT_TOL else 0.0
            note = "every seed gives the same difference"
        else:
            from scipy.stats import ttest_rel

            p = float(ttest_rel(np.asarray(values_a, dtype=np.float64),
                                np.asarray(values_b, dtype=np.float64)).pvalue)
    else:
        p, exact = sign_flip_pvalue(d, resamples=resamples, seed=seed)
        note = (f"exact: all {2**n} sign flips" if exact
                else f"Monte-Carlo: {resamples} random sign flips (seed {seed})")
    return PairTest(a=a, b=b, metric=metric, n=n, diff=mean, ci95=(mean - half, mean + half),
                    p=p, test=name, note=note)


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values, in the order given (Holm 1979).

    With the m p-values sorted ascending, p_(1) <= ... <= p_(m), the adjusted value of the i-th
    is ``max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting where it is below alpha controls the
    family-wise error rate at alpha. None (a pair without a test) is not part of the family (it
    does not count in m) and stays None.
    """
    index = [i for i, p in enumerate(pvalues) if p is not None]
    out: list[float | None] = [None] * len(pvalues)
    m = len(index)
    running = 0.0
    for j, i in enumerate(sorted(index, key=lambda i: (pvalues[i], i))):
        p = pvalues[i]
        assert p is not None
        running = max(running, min(1.0, (m - j) * p))
        out[i] = running
    return out


def all_pairs(values: Mapping[str, Sequence[float]], seeds: Mapping[str, Sequence[int]], *,
              metric: str, test: str = "t", resamples: int = 100_000,
              seed: int = 0) -> list[PairTest]:
    """Every pair (a, b) of the methods of ``values`` (in its order, a before b) on ``metric``,
    with Holm's correction over this family (all pairs of this one metric)."""
    names = list(values)
    pairs = [paired_test(values[a], values[b], seeds_a=seeds[a], seeds_b=seeds[b], a=a, b=b,
                         metric=metric, test=test, resamples=resamples, seed=seed)
             for a, b in itertools.combinations(names, 2)]
    adjusted = holm([p.p for p in pairs])
    return [dataclasses.replace(p, p_holm=h) for p, h in zip(pairs, adjusted)]


def verdict(pair: PairTest, mode: str, alpha: float = ALPHA) -> str:
    """``"a better"``, ``"b better"`` (Holm p below ``alpha``; better by ``mode``) or ``"not
    separable at 5%"``; ``"no test"`` without a p-value."""
    if pair.p_holm is None:
        return "no test"
    if pair.p_holm >= alpha or pair.diff == 0:
        return f"not separable at {alpha:.0%}"
    a_better = pair.diff > 0 if mode == "max" else pair.diff < 0
    return "a better" if a_better else "b better"


def named_verdict(pair: PairTest, mode: str, alpha: float = ALPHA) -> str:
    """:func:`verdict` with the better method named: ``"proxy_anchor better"``."""
    text = verdict(pair, mode, alpha)
    return {"a better": f"{pair.a} better", "b better": f"{pair.b} better"}.get(text, text)


def rank_methods(stats: Mapping[str, MeanCI], pairs: Sequence[PairTest], *, mode: str,
                 alpha: float = ALPHA) -> list[MethodRank]:
    """Methods ranked by mean (``mode`` "max": highest first; "min": lowest first; equal means
    by name), in groups the data cannot separate.

    The rule, "groups of methods not significantly different from the group's best": walk the
    methods in rank order; the first one leads group 1; each next method joins the current
    group when its Holm-corrected paired p-value against the group's leader (its best) is
    >= ``alpha`` (or there is no test: fewer than 2 seeds), and otherwise leads a new group.
    So every group is a run of consecutive ranks, and each member's claim can be read in one row
    of the pairwise table (member vs leader). A method is ``tied`` when its group has another
    member. Groups say nothing about members of different groups other than the leaders: the
    second of group 1 may be inseparable from the leader of group 2 (this rule does not chain,
    unlike "each method vs the one above it", which can put two significantly different methods
    in one group).

    ``pairs`` hold the Holm-corrected p-values (``p_holm``) of the methods' pairs, in either
    order (:func:`all_pairs`).
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    by_pair = {frozenset((p.a, p.b)): p for p in pairs}
    sign = -1.0 if mode == "max" else 1.0
    order = sorted(stats, key=lambda m: (sign * stats[m].mean, m))
    groups: list[list[str]] = []
    for name in order:
        if groups:
            pair = by_pair.get(frozenset((groups[-1][0], name)))
            if pair is None:
                raise ValueError(f"no paired test of {groups[-1][0]!r} and {name!r}")
            if pair.p_holm is None or pair.p_holm >= alpha:
                groups[-1].append(name)
                continue
        groups.append([name])
    group_of = {name: (g, members) for g, members in enumerate(groups, 1) for name in members}
    return [MethodRank(method=name, mean=stats[name].mean, half_width=stats[name].half_width,
                       rank=rank, group=group_of[name][0], leader=group_of[name][1][0],
                       tied=len(group_of[name][1]) > 1)
            for rank, name in enumerate(order, 1)]
