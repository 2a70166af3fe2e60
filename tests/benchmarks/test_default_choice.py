"""The choice of the default by docs/benchmarks.md's rule (``benchmarks/default_choice.py``,
issue 36) on hand-made table summaries: the best pooled average rank at 25% among the product's
methods (never a sweep), ties within 0.1 decided at 100%, leave-one-table-out, a held-out table
that no choice reads, the goal checks, and the paired bootstrap interval against a slow
reference."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from benchmarks.default_choice import FRACTIONS
from benchmarks.default_choice import apply_rule
from benchmarks.default_choice import default_choice
from benchmarks.default_choice import default_choice_markdown
from benchmarks.default_choice import goal_checks
from benchmarks.default_choice import paired_difference

PRODUCT = {"a", "b", "c", "random"}  # the candidates; "sweep" is not one


def _table(at25: dict[str, list[float]], at100: dict[str, list[float]] | None = None, *,
           sigma: float = 0.02, best: float = 0.6, worst: float = 0.2,
           tests: dict[str, float] | None = None) -> dict[str, Any]:
    """A table summary as ``summarise_table`` shapes it, from each method's per-seed regrets
    at 25% (and at 100%; default: the 25% ones halved); 10% and 50% copy 25%."""
    at100 = at100 or {m: [v / 2 for v in vs] for m, vs in at25.items()}
    blocks = {m: {str(s): [v, v, v, at100[m][s]] for s, v in enumerate(vs)}
              for m, vs in at25.items()}
    scale = (best - worst) / sigma

    def stats(values: list[float]) -> dict[str, float]:
        mean = sum(values) / len(values)
        return {"mean": mean, "low": min(values), "high": max(values)}

    methods = {m: {"regret_at": {str(f): stats([row[i] for row in blocks[m].values()])
                                 for i, f in enumerate(FRACTIONS)},
                   "regret_in_sigma_at": {"0.25": stats([v * scale for v in at25[m]])},
                   "median_test_of_pick": (tests or {}).get(m, 0.5)}
               for m in at25}
    seeds = list(blocks[next(iter(blocks))])
    ranks = {str(f): _ranks([{m: blocks[m][s][i] for m in blocks} for s in seeds])
             for i, f in enumerate(FRACTIONS)}
    return {"blocks": blocks, "methods": methods, "average_rank": ranks, "sigma_val": sigma,
            "reference": {"best": best, "worst": worst, "best_test": 0.5,
                          "seed_noise": {"sigma_test": 0.01}}}


def _ranks(blocks: list[dict[str, float]]) -> dict[str, float]:
    """Average ranks by hand (ties share their mean rank): the fixtures' own, cheap."""
    totals: dict[str, float] = dict.fromkeys(blocks[0], 0.0)
    for block in blocks:
        for method, value in block.items():
            below = sum(v < value for v in block.values())
            equal = sum(v == value for v in block.values())
            totals[method] += below + (equal + 1) / 2
    return {m: t / len(blocks) for m, t in totals.items()}


def _duel(wins: int, losses: int, at100_a_better: bool) -> dict[str, Any]:
    """Methods a and b over wins + losses seeds: a has the lower regret at 25% on ``wins``
    seeds; at 100% a (or b) is lower on every seed; a sweep is worst at 25% everywhere."""
    n = wins + losses
    a = [0.1 if s < wins else 0.3 for s in range(n)]
    b = [0.3 if s < wins else 0.1 for s in range(n)]
    low, high = [0.01] * n, [0.05] * n
    return _table({"a": a, "b": b, "sweep": [0.9] * n},
                  {"a": low if at100_a_better else high, "b": high if at100_a_better else low,
                   "sweep": [0.9] * n})


def test_ranks_within_0_1_at_25_are_decided_at_100() -> None:
    close = {"t": _duel(21, 19, at100_a_better=False)}  # ranks 1.475 / 1.525 at 25%
    rule = apply_rule(close, PRODUCT)
    assert rule["leader_at_25"] == "a" and set(rule["within_tie"]) == {"a", "b"}
    assert rule["chosen"] == "b"
    apart = {"t": _duel(25, 15, at100_a_better=False)}  # 1.375 / 1.625: 0.25 apart
    rule = apply_rule(apart, PRODUCT)
    assert rule["within_tie"] == ["a"] and rule["chosen"] == "a"
    assert rule["average_rank"]["0.25"]["a"] == pytest.approx(1.375)
    assert rule["blocks"] == 40 and rule["nemenyi_cd"] > 0


def test_a_sweep_is_ranked_but_never_chosen() -> None:
    n = 12
    table = _table({"sweep": [0.0] * n, "a": [0.2] * n, "b": [0.3] * n},
                   {"sweep": [0.0] * n, "a": [0.1] * n, "b": [0.05] * n})
    rule = apply_rule({"t": table}, PRODUCT)
    assert rule["average_rank"]["0.25"]["sweep"] == 1.0 and "sweep" not in rule["candidates"]
    assert rule["chosen"] == "a"
    with pytest.raises(ValueError, match="no candidate"):
        apply_rule({"t": _table({"sweep": [0.1] * 3})}, PRODUCT)


def test_ranks_are_pooled_over_tables_and_only_methods_every_table_ran() -> None:
    n = 10
    one = _table({"a": [0.1] * n, "b": [0.2] * n, "c": [0.0] * n})  # c only here
    two = _table({"a": [0.3] * n, "b": [0.2] * n})
    three = _table({"a": [0.1] * n, "b": [0.2] * n})
    rule = apply_rule({"one": one, "two": two, "three": three}, PRODUCT)
    assert rule["methods"] == ["a", "b"] and rule["blocks"] == 3 * n
    assert rule["average_rank"]["0.25"]["a"] == pytest.approx((1 + 2 + 1) / 3)
    assert rule["chosen"] == "a"


def _tables(held_out_favours: str) -> dict[str, Any]:
    """Three development tables on which a leads at 25% (by more than 0.1) and a held-out one
    where ``held_out_favours`` wins every seed by far (with enough seeds to turn the pooled
    ranks were it counted)."""
    n = 10
    dev = {name: _table({"a": [0.10 + 0.01 * s for s in range(n)],
                         "b": [0.12 + 0.01 * s for s in range(n)],
                         "random": [0.3] * n, "sweep": [0.5] * n})
           for name in ("d1", "d2", "d3")}
    m = 40  # pooled with the 30 development blocks: a 150/70, b 100/70
    other = "b" if held_out_favours == "a" else "a"
    held = _table({held_out_favours: [0.0] * m, other: [0.4] * m, "random": [0.3] * m,
                   "sweep": [0.5] * m})
    return {**dev, "h": held}


def test_a_held_out_table_never_influences_the_choice() -> None:
    for favours in ("a", "b"):
        choice = default_choice(_tables(favours), candidates=PRODUCT, default_method="a",
                                held_out="h")
        assert choice["on_development"]["chosen"] == "a"
        assert choice["on_development"]["tables"] == ["d1", "d2", "d3"]
        assert {f["chosen"] for f in choice["leave_one_out"].values()} == {"a"}
        assert all("h" not in f["rule"]["tables"] for f in choice["leave_one_out"].values())
        assert choice["held_out"]["chosen"] == "a" and choice["held_out"]["table"] == "h"
    # counted, the same table would turn the choice: the test above can fail
    counted = default_choice(_tables("b"), candidates=PRODUCT, default_method="a")
    assert counted["on_development"]["chosen"] == "b" and counted["held_out"] is None
    with pytest.raises(ValueError, match="held-out"):
        default_choice(_tables("a"), candidates=PRODUCT, default_method="a", held_out="x")


def test_leave_one_table_out_reports_each_development_table() -> None:
    tables = _tables("b")
    choice = default_choice(tables, candidates=PRODUCT, default_method="a", held_out="h")
    assert list(choice["leave_one_out"]) == ["d1", "d2", "d3"]
    fold = choice["leave_one_out"]["d2"]
    assert fold["rule"]["tables"] == ["d1", "d3"]
    on = fold["on_table"]
    assert on["method"] == "a" and on["best_at_25"] == "a" and on["gap_to_best_at_25"] == 0
    assert on["regret_at"]["0.25"]["mean"] == pytest.approx(0.145)
    assert on["regret_in_sigma_at_25"]["mean"] == pytest.approx(0.145 * 0.4 / 0.02)
    assert on["position_at_25"] == 1 and on["methods"] == 4
    held = choice["held_out"]["on_table"]  # on h, b wins: a is 0.4 behind, 8σ
    assert held["best_at_25"] == "b" and held["gap_in_sigma_to_best_at_25"] == pytest.approx(8.0)
    assert held["position_at_25"] == 3  # a (0.4) behind b (0) and random (0.3)
    assert set(choice["goals"]["tables"]) == {"d1", "d2", "d3", "h"}
    assert choice["goals"]["tables"]["h"]["held_out"]
    text = default_choice_markdown(choice)
    assert "| h (held out" in text and "| d2 | a |" in text and "without d1" in text


def test_the_best_product_method_is_reported_beside_the_best_of_all() -> None:
    n = 4
    table = _table({"sweep": [0.05] * n, "a": [0.2] * n, "b": [0.1] * n})
    on = default_choice({"t": table, "u": table}, candidates=PRODUCT,
                        default_method="a")["leave_one_out"]["t"]["on_table"]
    assert on["method"] == "b" and on["best_at_25"] == "sweep"
    assert on["best_product_at_25"] == "b" and on["gap_in_sigma_to_best_product_at_25"] == 0
    assert on["gap_in_sigma_to_best_at_25"] == pytest.approx(0.05 * 0.4 / 0.02)
    g = goal_checks(table, "a", candidates=PRODUCT)
    assert g["best_at_25"] == "sweep" and g["gap_in_sigma_at_25"] == pytest.approx(3.0)
    assert g["gap_in_sigma_to_best_product_at_25"] == pytest.approx(2.0)


def test_the_goal_checks() -> None:
    n = 10
    good = _table({"a": [0.10] * n, "b": [0.105] * n, "random": [0.3] * n},
                  {"a": [0.01] * n, "b": [0.01] * n, "random": [0.05] * n},
                  tests={"a": 0.495})
    g = goal_checks(good, "a")
    assert g["checks"] == {"better_than_random_at_100": True, "within_half_sigma_at_25": True,
                           "not_last_at_25": True, "pick_within_one_sigma": True} and g["met"]
    assert g["difference_at_100_vs_baseline"]["mean"] == pytest.approx(-0.04)
    bad = _table({"a": [0.4] * n, "b": [0.1] * n, "random": [0.3] * n},
                 {"a": [0.05 + (0.02 if s % 2 else -0.02) for s in range(n)], "b": [0.01] * n,
                  "random": [0.05] * n}, tests={"a": 0.48})
    g = goal_checks(bad, "a")
    assert g["checks"] == {"better_than_random_at_100": False,
                           "within_half_sigma_at_25": False, "not_last_at_25": False,
                           "pick_within_one_sigma": False} and not g["met"]
    assert g["gap_in_sigma_at_25"] == pytest.approx(0.3 * 0.4 / 0.02)
    assert g["test_shortfall_in_sigma_test"] == pytest.approx(2.0)
    no_sigma = {**good, "sigma_val": 0.0}
    assert goal_checks(no_sigma, "a")["checks"]["within_half_sigma_at_25"] is None


def _slow_paired(values: dict, baseline: dict, resamples: int, seed: int) -> tuple:
    """By hand: the pairs by seed, resampled with the same generator's draws, each mean summed
    in a loop, the percentiles interpolated in the sorted means."""
    seeds = sorted(set(values) & set(baseline))
    diffs = [values[s] - baseline[s] for s in seeds]
    n = len(diffs)
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    means = sorted(sum(diffs[int(j)] for j in row) / n for row in draws)

    def at(q: float) -> float:
        position = q * (len(means) - 1)
        low = math.floor(position)
        high = min(low + 1, len(means) - 1)
        return means[low] + (means[high] - means[low]) * (position - low)

    return sum(diffs) / n, at(0.025), at(0.975), n


def test_the_paired_difference_interval_against_a_slow_reference() -> None:
    rng = random.Random(3)
    seeds = list(range(25))
    values = {s: rng.random() for s in seeds}
    baseline = {s: values[s] - 0.05 + rng.gauss(0, 0.02) for s in seeds}
    baseline[99] = 5.0  # a seed only the baseline ran: not paired
    shuffled = dict(sorted(values.items(), key=lambda kv: rng.random()))
    got = paired_difference(shuffled, baseline, resamples=3000, seed=4)
    mean, low, high, pairs = _slow_paired(values, baseline, 3000, 4)
    assert got["pairs"] == pairs == 25
    assert got["mean"] == pytest.approx(mean, abs=1e-12)
    assert got["low"] == pytest.approx(low, abs=1e-12)
    assert got["high"] == pytest.approx(high, abs=1e-12)
    assert 0 < got["low"] < got["mean"] < got["high"]
    # paired, the spread of the values themselves (0-1) does not widen the interval
    assert got["high"] - got["low"] < 0.03
