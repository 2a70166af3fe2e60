"""The pure helpers of the benchmarks (the benchmarks themselves are never run by the tests)."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks.orchestration import epoch_split
from benchmarks.orchestration import fixed_cost_per_trial
from benchmarks.orchestration import learning_rates
from benchmarks.efficiency_tables import one_at_a_time_sweep
from benchmarks.hpo_measures import best_at
from benchmarks.hpo_measures import epochs_to_target
from benchmarks.hpo_measures import quantiles
from benchmarks.hpo_measures import trajectory


def _score(point: dict) -> float:
    """A separable objective: best at a=2, b=30, c=0.1."""
    return -abs(point["a"] - 2) - abs(point["b"] - 30) / 10 - abs(point["c"] - 0.1)


def test_the_sweep_varies_one_parameter_at_a_time_and_keeps_the_best() -> None:
    plan = [({"loss": "x", "a": 1, "b": 10, "c": 0.5},
             [("a", [1, 2, 3]), ("b", [10, 30]), ("c", [0.1, 0.5])])]
    events = one_at_a_time_sweep(plan, _score, concurrency=2, epochs=3)
    done = [e for e in events if e["finished"]]
    assert len(events) == 3 * len(done)  # every trained point is 3 epochs of events
    assert done[-1]["config"] == {"loss": "x", "a": 2, "b": 30, "c": 0.1}
    assert max(done, key=lambda e: e["score"])["config"] == done[-1]["config"]
    # each stage adds only the points not trained yet: 3 + (2 - 1) + (2 - 1)
    assert len(done) == 5
    assert len({json_key(e["config"]) for e in done}) == len(done)  # nothing trained twice
    # in the order given: a's values first
    assert [e["config"]["a"] for e in done[:3]] == [1, 2, 3]
    # a batch of 2 trains side by side: its points finish on its last 2 epochs' events, none
    # before (a concurrent search's trials would not either)
    finished_at = [n for n, e in enumerate(events, 1) if e["finished"]]
    assert finished_at[:2] == [5, 6]


def json_key(point: dict) -> tuple:
    return tuple(sorted(point.items()))


def test_each_loss_is_swept_from_its_own_defaults() -> None:
    plan = [({"loss": "x", "a": 1}, [("a", [1, 2])]),
            ({"loss": "y", "a": 2, "d": 0}, [("a", [1, 2]), ("d", [0, 1])])]
    events = one_at_a_time_sweep(plan, lambda p: float(p["a"]), concurrency=4, epochs=1)
    configs = [e["config"] for e in events]
    assert configs[:2] == [{"loss": "x", "a": 1}, {"loss": "x", "a": 2}]  # x first, as planned
    assert {"loss": "y", "a": 2, "d": 0} in configs
    assert all(set(c) == set(plan[0 if c["loss"] == "x" else 1][0]) for c in configs)


def test_epochs_to_target_counts_every_epoch_until_a_finished_trial_reaches_it() -> None:
    events = [(0.9, 0),  # a pruned trial's score: not counted
              (0.5, 1), (None, 0), (0.95, 1)]
    assert epochs_to_target(events, 0.8) == 4
    assert epochs_to_target(events, 0.99) == math.inf
    assert epochs_to_target(events, 0.6, mode="min") == 2
    assert trajectory(events) == [(2, 0.5), (4, 0.95)]
    assert best_at(trajectory(events), 3) == 0.5 and best_at(trajectory(events), 1) is None


def test_quantiles_allow_searches_that_never_reach_the_target() -> None:
    assert quantiles([1.0, 3.0, 2.0]) == (2.0, 1.5, 2.5)
    median, q1, q3 = quantiles([1.0, 2.0, math.inf, math.inf, math.inf])
    assert median == math.inf and q1 == 2.0 and q3 == math.inf


def test_orchestration_helpers() -> None:
    assert fixed_cost_per_trial(130.0, 120.0, 4) == pytest.approx(2.5)
    assert learning_rates(1) == [1e-3]
    rates = learning_rates(4)
    assert rates[0] == 5e-4 and rates[-1] == 4e-3 and rates == sorted(rates)
    split = epoch_split([5.0, 1.0, 2.0, 1.5])
    assert split == {"first": 5.0, "later_median": 1.5, "total": 9.5}


# ---- the HPO field's measures (benchmarks/hpo_measures.py) ------------------------------------
def test_normalised_regret_follows_the_incumbent_of_trials_that_trained_to_their_end() -> None:
    from benchmarks.hpo_measures import regret_curve

    events = [(0.9, 0), (0.5, 1), (None, 0), (0.7, 1), (0.6, 1)]
    # best 1.0, worst 0.0: no incumbent yet, then 0.5, then 0.7 (a pruned 0.9 never counts)
    assert regret_curve(events, [1, 2, 3, 4, 5], best=1.0, worst=0.0) == pytest.approx(
        [1.0, 0.5, 0.5, 0.3, 0.3])
    assert regret_curve([(1.2, 1)], [1], best=1.0, worst=0.0) == [0.0]  # clipped


def test_the_bootstrap_interval_matches_a_slow_reference() -> None:
    from benchmarks.hpo_measures import bootstrap_mean

    values = [0.1, 0.4, 0.35, 0.8, 0.2, 0.05, 0.6]
    fast = bootstrap_mean(values, resamples=20_000, seed=1)
    rng = random.Random(5)
    slow = sorted(sum(rng.choice(values) for _ in values) / len(values) for _ in range(20_000))
    assert fast["mean"] == pytest.approx(sum(values) / len(values))
    assert fast["low"] == pytest.approx(slow[500], abs=0.01)
    assert fast["high"] == pytest.approx(slow[19_499], abs=0.01)


def test_average_ranks_and_friedman_agree_with_scipy() -> None:
    from scipy.stats import friedmanchisquare

    from benchmarks.hpo_measures import average_ranks
    from benchmarks.hpo_measures import friedman

    blocks = [{"a": 0.1, "b": 0.3, "c": 0.2}, {"a": 0.2, "b": 0.2, "c": 0.5},
              {"a": 0.0, "b": 0.4, "c": 0.3}, {"a": 0.1, "b": 0.6, "c": 0.1}]
    assert average_ranks(blocks) == pytest.approx({"a": (1 + 1.5 + 1 + 1.5) / 4,
                                                   "b": (3 + 1.5 + 3 + 3) / 4,
                                                   "c": (2 + 3 + 2 + 1.5) / 4})
    reference = friedmanchisquare([0.1, 0.2, 0.0, 0.1], [0.3, 0.2, 0.4, 0.6],
                                  [0.2, 0.5, 0.3, 0.1])
    assert friedman(blocks) == pytest.approx({"statistic": reference.statistic,
                                              "p_value": reference.pvalue})
    assert friedman(blocks[:1]) == {"statistic": None, "p_value": None}


def test_the_thesis_sweep_plan_is_table15_in_order_from_the_defaults() -> None:
    from benchmarks.efficiency_tables import TABLES
    from benchmarks.efficiency_tables import sweep_plan

    starts = {"multi_similarity": {"loss": "multi_similarity", "lr": 1e-3, "loss.margin": 0.5,
                                   "loss.alpha": 2.0, "loss.beta": 50.0, "loss.epsilon": 0.1}}
    (start, stages), = sweep_plan(TABLES["omniglot-ms"], "sweep-table15", starts)
    assert start == starts["multi_similarity"]
    assert [k for k, _ in stages] == ["loss.margin", "loss.alpha", "loss.beta", "loss.epsilon"]
    assert [len(v) for _, v in stages] == [11, 50, 50, 11]  # 122 trainings, as the thesis ran
    assert stages[1][1][:3] == [2, 4, 6] and stages[0][1][-1] == 1.0
    (_, stages), = sweep_plan(TABLES["omniglot-ms"], "sweep", starts)
    assert stages[0][0] == "lr" and len(stages[0][1]) == 9  # the learning rate first


def test_the_results_tables_render_what_the_summary_holds() -> None:
    from benchmarks.search_efficiency import markdown

    def method(regret: float, to_top: float, **extra: object) -> dict:
        return {"seeds": 2, "reached_top5": int(math.isfinite(to_top)),
                "median_epochs_to_top5": to_top, "iqr_epochs_to_top5": [to_top, math.inf],
                "regret_at": {str(f): {"mean": regret * f, "low": regret * f - 0.01,
                                       "high": regret * f + 0.01} for f in (0.1, 0.25, 0.5, 1.0)},
                "median_test_of_pick": 0.45, "test_of_pick_vs_best": 0.9,
                "beats_defaults_at_15": 1, **extra}

    shares = ("0.1", "0.25", "0.5", "1.0")
    body = {"default_method": "tpe+asha", "small_budget_trials": 15, "tables": {"t": {
        "reference": {"best": 0.8, "worst": 0.2, "top_target": 0.75, "best_test": 0.5,
                      "defaults": [{"test": 0.3}, {"test": 0.35}]},
        "methods": {"tpe+asha": method(0.4, 36.5),
                    "sweep": method(1.0, math.inf,
                                    whole_sweep={"trainings": 7, "epochs": 84})},
        "average_rank": {"0.25": {"tpe+asha": 1.25, "sweep": 1.75}},
        "friedman": {"0.25": {"statistic": 3.5, "p_value": 0.0123}}}},
        "over_tables": {"average_rank": {f: {"tpe+asha": 1.0, "sweep": 2.0} for f in shares},
                        "mean_regret": {f: {"tpe+asha": 0.1, "sweep": 0.9} for f in shares},
                        "friedman": {f: {"statistic": 4.0, "p_value": 0.05} for f in shares}}}
    text = markdown(body)
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    default = next(r for r in rows if r.startswith("| **tpe+asha (default)**"))
    assert "| 0.100 [0.090, 0.110] |" in default  # 25% of a regret of 0.4
    assert "| 36.5 (36.5–∞), 1/2 | 1.25 | 0.450 (0.900) | 1/2 |" in default
    sweep = next(r for r in rows if r.startswith("| sweep (whole sweep: 7 trainings, 84 epochs)"))
    assert "| ∞ (∞–∞), 0/2 |" in sweep
    assert "published defaults test 0.3500" in text  # the better of the defaults
    assert "p = 0.012" in text
    over = [r for r in rows if r.startswith("| tpe+asha |") or r.startswith("| sweep |")]
    assert over[0].startswith("| tpe+asha | 1.00 | 1.00") and over[1].endswith("| 0.900 |")


def test_exit_cost_summarises_each_way_and_the_per_repetition_ratio() -> None:
    from benchmarks.exit_cost import summarise

    seconds = {"frozen": {"whole": [10.0, 12.0, 11.0], "exit": [0.5, 0.4, 0.6]},
               "collected": {"whole": [20.0, 12.0, 11.0], "exit": [2.0, 4.0, 3.0]}}
    out = summarise(seconds)
    assert out["whole"]["frozen"] == {"median": 11.0, "q1": 10.5, "q3": 11.5}
    assert out["exit"]["collected"]["median"] == 3.0
    # ratios pair repetition i with repetition i, then take their median: 0.25, 0.1, 0.2
    assert out["exit"]["ratio_frozen_over_collected"]["median"] == pytest.approx(0.2)
    assert out["whole"]["ratio_frozen_over_collected"]["median"] == pytest.approx(1.0)
