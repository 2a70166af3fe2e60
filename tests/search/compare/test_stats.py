"""The comparison's statistics against SciPy and hand computations: intervals, paired tests,
the sign-flip permutation test, Holm's correction, the rank groups and the tournament."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from dmlsearch.search.compare.comparison_md import comparison_tournament
from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.outcome import MethodOutcome
from dmlsearch.search.compare.stats import MeanCI
from dmlsearch.search.compare.stats import PairTest
from dmlsearch.search.compare.stats import all_pairs
from dmlsearch.search.compare.stats import holm
from dmlsearch.search.compare.stats import mean_ci
from dmlsearch.search.compare.stats import method_values
from dmlsearch.search.compare.stats import paired_differences
from dmlsearch.search.compare.stats import paired_test
from dmlsearch.search.compare.stats import rank_methods
from dmlsearch.search.compare.stats import sign_flip_pvalue
from dmlsearch.search.compare.stats import verdict

A = [0.652, 0.661, 0.648, 0.670, 0.659, 0.655, 0.663]
B = [0.640, 0.662, 0.641, 0.659, 0.650, 0.657, 0.649]
SEEDS = list(range(7))


def _method(name: str, values: list[float], *, metric: str = "recall@1",
            seeds: list[int] | None = None) -> MethodOutcome:
    seeds = list(range(len(values))) if seeds is None else seeds
    return MethodOutcome(name=name, space=name, source="", budget_planned={}, budget_used={},
                         fell_short=None, best_trial=None, best_val=None, best_config={},
                         trajectory=[], seeds=seeds, test_metrics=[{metric: v} for v in values],
                         study_dir="")


def _comparison(name: str, methods: dict[str, list[float]], **kw: Any) -> Comparison:
    return Comparison(name=name, dataset="cub200", metric="recall@1", mode="max", shared={},
                      methods=[_method(m, v) for m, v in methods.items()], **kw)


# ---- intervals ----------------------------------------------------------------------------------
def test_mean_ci_is_the_student_t_interval() -> None:
    got = mean_ci(A)
    low, high = sps.t.interval(0.95, len(A) - 1, loc=np.mean(A), scale=sps.sem(A))
    assert got.mean == pytest.approx(np.mean(A))
    assert got.low == pytest.approx(low) and got.high == pytest.approx(high)
    assert got.n == 7


def test_mean_ci_of_one_value_has_no_interval() -> None:
    got = mean_ci([0.5])
    assert got == MeanCI(mean=0.5, half_width=None, n=1) and got.low is None
    with pytest.raises(ValueError):
        mean_ci([])


def test_method_values_in_seed_order_or_none_when_a_seed_lacks_the_metric() -> None:
    m = _method("x", [0.1, 0.2])
    assert method_values(m, "recall@1") == [0.1, 0.2]
    assert method_values(m, "map@r") is None
    nan = _method("y", [0.1, math.nan])
    assert method_values(nan, "recall@1") is None


# ---- paired tests -------------------------------------------------------------------------------
def test_differences_pair_by_seed_and_refuse_other_seeds() -> None:
    d = paired_differences([3.0, 5.0], [1.0, 1.0], seeds_a=[4, 7], seeds_b=[4, 7])
    assert d.tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match="seeds differ"):
        paired_differences([1.0, 2.0], [1.0, 2.0], seeds_a=[0, 1], seeds_b=[1, 0])
    with pytest.raises(ValueError, match="seeds differ"):
        paired_differences([1.0, 2.0], [1.0], seeds_a=[0, 1], seeds_b=[0])
    with pytest.raises(ValueError, match="values"):
        paired_differences([1.0], [1.0], seeds_a=[0, 1], seeds_b=[0, 1])


def test_paired_t_against_scipy() -> None:
    got = paired_test(A, B, seeds_a=SEEDS, seeds_b=SEEDS, a="A", b="B", metric="recall@1")
    ref = sps.ttest_rel(A, B)
    ci = ref.confidence_interval(0.95)
    assert got.test == "paired t" and got.n == 7 and (got.a, got.b) == ("A", "B")
    assert got.diff == pytest.approx(np.mean(np.subtract(A, B)))
    assert got.p == pytest.approx(ref.pvalue)
    assert got.ci95 == pytest.approx((ci.low, ci.high))
    swapped = paired_test(B, A, seeds_a=SEEDS, seeds_b=SEEDS)
    assert swapped.p == pytest.approx(got.p) and swapped.diff == pytest.approx(-got.diff)


def test_one_seed_gives_no_p_value_and_says_why() -> None:
    got = paired_test([0.7], [0.6], seeds_a=[3], seeds_b=[3])
    assert got.p is None and got.ci95 is None and got.diff == pytest.approx(0.1)
    assert got.note is not None and "2 seeds" in got.note
    perm = paired_test([0.7], [0.6], seeds_a=[3], seeds_b=[3], test="permutation")
    assert perm.p is None


def test_constant_differences() -> None:
    same = paired_test([0.5, 0.6, 0.7], [0.5, 0.6, 0.7], seeds_a=[0, 1, 2], seeds_b=[0, 1, 2])
    assert same.p == 1.0 and same.diff == 0.0
    shifted = paired_test([1.5, 2.5, 3.5], [0.5, 1.5, 2.5], seeds_a=[0, 1, 2],
                          seeds_b=[0, 1, 2])
    with warnings.catch_warnings():  # SciPy warns of the zero spread, then gives t = inf
        warnings.simplefilter("ignore", RuntimeWarning)
        limit = sps.ttest_rel([1.5, 2.5, 3.5], [0.5, 1.5, 2.5]).pvalue
    assert shifted.p == limit == 0.0
    # equal up to rounding: no warning from SciPy about catastrophic cancellation
    rounded = paired_test([0.80, 0.81, 0.805], [0.79, 0.80, 0.795], seeds_a=[0, 1, 2],
                          seeds_b=[0, 1, 2])
    assert rounded.p == 0.0 and rounded.diff == pytest.approx(0.01)
    assert rounded.note == "every seed gives the same difference"


def test_unknown_test_is_an_error() -> None:
    with pytest.raises(ValueError, match="permutation"):
        paired_test(A, B, seeds_a=SEEDS, seeds_b=SEEDS, test="wilcoxon")


# ---- the sign-flip permutation test -------------------------------------------------------------
def test_sign_flip_by_hand() -> None:
    # d = 1, 2, 3: the 8 flips' sums are ±6, ±4, ±2, 0, 0; |sum| >= 6 in 2 of 8.
    assert sign_flip_pvalue([1.0, 2.0, 3.0]) == (0.25, True)
    # d = 1, -1: sums 0, ±2, 0 -> |mean| >= 0 always.
    assert sign_flip_pvalue([1.0, -1.0]) == (1.0, True)


def _scipy_permutation(a: list[float], b: list[float]) -> float:
    def statistic(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        return np.mean(x - y, axis=axis)

    return float(sps.permutation_test((a, b), statistic, permutation_type="samples",
                                      n_resamples=np.inf, alternative="two-sided",
                                      vectorized=True).pvalue)


@pytest.mark.parametrize("a, b", [
    (A, B),
    ([0.61, 0.63, 0.62, 0.64, 0.60], [0.60, 0.61, 0.62, 0.61, 0.58]),  # a zero difference
    ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2.0, 1.0, 4.0, 3.0, 6.0, 5.0]),  # all |d| equal: ties
    ([0.5, 0.4, 0.7, 0.2, 0.9, 0.3, 0.8, 0.6, 0.1, 0.55, 0.45, 0.35],
     [0.45, 0.42, 0.6, 0.25, 0.8, 0.31, 0.7, 0.61, 0.12, 0.5, 0.4, 0.3]),
])
def test_exact_sign_flip_against_scipy(a: list[float], b: list[float]) -> None:
    seeds = list(range(len(a)))
    got = paired_test(a, b, seeds_a=seeds, seeds_b=seeds, test="permutation")
    assert got.test == "permutation" and got.note is not None and "exact" in got.note
    assert got.p == pytest.approx(_scipy_permutation(a, b), rel=1e-12)


def test_monte_carlo_sign_flip_is_seeded_and_close_to_exact() -> None:
    rng = np.random.default_rng(7)
    d = rng.normal(0.004, 0.01, size=17)
    exact, is_exact = sign_flip_pvalue(d, exact_max=17)
    assert is_exact
    mc, is_exact = sign_flip_pvalue(d, resamples=20_000, seed=3)
    assert not is_exact
    assert mc == sign_flip_pvalue(d, resamples=20_000, seed=3)[0]  # reproducible
    assert abs(mc - exact) < 0.015  # 3.5 standard errors of a 20,000-flip estimate
    # the observed flip counts: never 0
    assert sign_flip_pvalue(np.full(17, 0.01) + np.arange(17) * 1e-4, resamples=999)[0] \
        == pytest.approx(1 / 1000)
    seeds = list(range(17))
    got = paired_test(d.tolist(), [0.0] * 17, seeds_a=seeds, seeds_b=seeds, test="permutation",
                      resamples=20_000, seed=3)
    assert got.p == mc and got.note is not None and "Monte-Carlo" in got.note


# ---- Holm ---------------------------------------------------------------------------------------
def test_holm_by_hand() -> None:
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> max so far 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # capped at 1; None is outside the family (m = 2)
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    got = holm([0.01, None, 0.02])
    assert got[1] is None and got[0] == pytest.approx(0.02) and got[2] == pytest.approx(0.02)
    assert holm([]) == []
    assert holm([0.2]) == [0.2]


def test_holm_against_statsmodels() -> None:
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    p = [0.001, 0.2, 0.013, 0.04, 0.04, 0.9, 0.0101]
    expected = multitest.multipletests(p, method="holm")[1]
    assert holm(p) == pytest.approx(list(expected))


def test_all_pairs_holm_over_the_metric_family() -> None:
    values = {"x": A, "y": B, "z": [v - 0.02 for v in A]}
    pairs = all_pairs(values, {k: SEEDS for k in values}, metric="recall@1")
    assert [(p.a, p.b) for p in pairs] == [("x", "y"), ("x", "z"), ("y", "z")]
    assert [p.p_holm for p in pairs] == pytest.approx(holm([p.p for p in pairs]))
    assert all(p.metric == "recall@1" for p in pairs)


# ---- verdicts and rank groups -------------------------------------------------------------------
def _pair(a: str, b: str, diff: float, p_holm: float | None) -> PairTest:
    return PairTest(a=a, b=b, metric="m", n=5, diff=diff, ci95=None, p=p_holm, test="paired t",
                    p_holm=p_holm)


def test_verdict() -> None:
    assert verdict(_pair("a", "b", 0.1, 0.01), "max") == "a better"
    assert verdict(_pair("a", "b", 0.1, 0.01), "min") == "b better"
    assert verdict(_pair("a", "b", -0.1, 0.01), "max") == "b better"
    assert verdict(_pair("a", "b", 0.1, 0.05), "max") == "not separable at 5%"
    assert verdict(_pair("a", "b", 0.1, None), "max") == "no test"


def test_rank_groups_against_the_groups_best() -> None:
    # means A > B > C > D. B vs A: 0.2 -> B joins A's group. C vs A: 0.01 -> C leads group 2,
    # although C vs B is 0.3 (groups do not chain). D vs C: 0.5 -> D joins group 2, although
    # D vs A (0.001) and D vs B (0.02) differ.
    stats = {n: MeanCI(mean=m, half_width=0.01, n=5)
             for n, m in {"C": 0.6, "A": 0.8, "D": 0.5, "B": 0.7}.items()}
    pairs = [_pair("A", "B", 0.1, 0.2), _pair("A", "C", 0.2, 0.01), _pair("B", "C", 0.1, 0.3),
             _pair("C", "D", 0.1, 0.5), _pair("A", "D", 0.3, 0.001), _pair("D", "B", -0.2, 0.02)]
    ranking = rank_methods(stats, pairs, mode="max")
    assert [(r.method, r.rank, r.group, r.leader, r.tied) for r in ranking] == [
        ("A", 1, 1, "A", True), ("B", 2, 1, "A", True),
        ("C", 3, 2, "C", True), ("D", 4, 2, "C", True)]
    # all separable: every method its own group, none tied
    separable = [_pair(p.a, p.b, p.diff, 0.001) for p in pairs]
    ranking = rank_methods(stats, separable, mode="max")
    assert [r.group for r in ranking] == [1, 2, 3, 4] and not any(r.tied for r in ranking)


def test_rank_groups_min_mode_ties_and_missing_tests() -> None:
    stats = {"lo": MeanCI(0.02, None, 1), "hi": MeanCI(0.05, None, 1),
             "eq": MeanCI(0.02, None, 1)}
    # no tests (one seed): nothing separates them; equal means ranked by name
    pairs = [_pair("lo", "hi", -0.03, None), _pair("lo", "eq", 0.0, None),
             _pair("hi", "eq", 0.03, None)]
    ranking = rank_methods(stats, pairs, mode="min")
    assert [(r.method, r.rank, r.group, r.tied) for r in ranking] == [
        ("eq", 1, 1, True), ("lo", 2, 1, True), ("hi", 3, 1, True)]
    alone = rank_methods({"x": MeanCI(0.1, None, 1)}, [], mode="max")
    assert [(r.rank, r.group, r.tied) for r in alone] == [(1, 1, False)]
    with pytest.raises(ValueError, match="no paired test"):
        rank_methods(stats, pairs[:1], mode="min")
    with pytest.raises(ValueError, match="mode"):
        rank_methods(stats, pairs, mode="best")


# ---- the tournament -----------------------------------------------------------------------------
def test_tournament_by_hand() -> None:
    # experiment 1: x 0.70 > y 0.65 > z 0.60 -> x 1, y 2, z 3
    # experiment 2: z 0.80 > x 0.75 = y 0.75 (means over seeds) -> z 1, x and y 2.5
    # experiment 3: y 0.5 > x 0.4; z has no recall@1 (a failed retrain) -> y 1, x 2
    one = _comparison("cub", {"x": [0.69, 0.71], "y": [0.64, 0.66], "z": [0.60, 0.60]})
    two = _comparison("cars", {"x": [0.70, 0.80], "y": [0.75, 0.75], "z": [0.79, 0.81]})
    three = Comparison(name="sop", dataset="sop", metric="recall@1", mode="max", shared={},
                       methods=[_method("x", [0.4, 0.4]), _method("y", [0.5, 0.5]),
                                _method("z", [0.9, 0.9], metric="map@r")])
    table = comparison_tournament([one, two, three])
    by = {r["item"]: r for r in table}
    assert [r["item"] for r in table] == ["x", "y", "z"]  # x 5.5/3, y 5.5/3 (by name), z 2
    assert by["x"]["ranks"] == [1.0, 2.5, 2.0] and by["x"]["mean"] == pytest.approx(11 / 6)
    assert by["y"]["ranks"] == [2.0, 2.5, 1.0] and by["y"]["mean"] == pytest.approx(11 / 6)
    assert by["z"]["ranks"] == [3.0, 1.0] and by["z"]["mean"] == pytest.approx(2.0)
    assert by["z"]["experiments"] == 2 and by["z"]["std"] == pytest.approx(1.0)
    assert by["x"]["std"] == pytest.approx(math.sqrt(14) / 6)
    assert by["z"]["by_experiment"] == [3.0, 1.0, None]
    assert by["x"]["by_experiment"] == [1.0, 2.5, 2.0]


def test_tournament_needs_one_metric_and_direction() -> None:
    one = _comparison("a", {"x": [0.7], "y": [0.6]})
    other = Comparison(name="b", dataset="cub200", metric="map@r", mode="max", shared={},
                       methods=[_method("x", [0.3], metric="map@r")])
    with pytest.raises(ValueError, match="different metrics"):
        comparison_tournament([one, other])
    assert comparison_tournament([]) == []
    # naming the metric ranks both by it (``other`` has one method: skipped)
    table = comparison_tournament([one, other], metric="recall@1")
    assert [(r["item"], r["ranks"]) for r in table] == [("x", [1.0]), ("y", [2.0])]
    eer = Comparison(name="v", dataset="cifar10", metric="eer", mode="min", shared={},
                     methods=[_method("x", [0.03], metric="eer"),
                              _method("y", [0.02], metric="eer")])
    assert [r["item"] for r in comparison_tournament([eer])] == ["y", "x"]
