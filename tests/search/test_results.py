"""Trial records, ranking in the metric's direction, the Pareto front (against a brute-force
reading of the definition), the budget, and the summary.json schema written and read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dmlsearch.search.results import Budget
from dmlsearch.search.results import EvalSet
from dmlsearch.search.results import RetrainSummary
from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import TrialState
from dmlsearch.search.results import best
from dmlsearch.search.results import budget_used
from dmlsearch.search.results import dominates
from dmlsearch.search.results import pareto_front
from dmlsearch.search.results import pareto_records
from dmlsearch.search.results import rank
from dmlsearch.search.results import read_summary
from dmlsearch.search.results import trajectory
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.trainables.errors import UserError
from tests.helpers import make_study
from tests.helpers import trial_record

RECORDS = [trial_record("a", 0.2), trial_record("b", 0.0), trial_record("c", None),
           trial_record("d", 0.5), trial_record("e", -1.0, state="failed"),
           trial_record("f", float("inf"), state="pruned")]


def test_best_trial_is_the_lowest_eer_or_the_highest_recall() -> None:
    assert best(RECORDS, "min").trial_id == "b"  # 0.0 is a score, not "missing"
    assert best(RECORDS, "max").trial_id == "d"  # inf (never evaluated) is no score
    assert best([trial_record("c", None)], "min") is None


def test_ranking_keeps_scored_trials_best_first_and_ties_in_order() -> None:
    assert [r.trial_id for r in rank(RECORDS, "min")] == ["b", "a", "d"]
    assert [r.trial_id for r in rank(RECORDS, "max")] == ["d", "a", "b"]
    tied = [trial_record("x", 0.5), trial_record("y", 0.5), trial_record("z", 0.6)]
    assert [r.trial_id for r in rank(tied, "max")] == ["z", "x", "y"]


def test_budget_adds_epochs_and_reserved_hours() -> None:
    records = [trial_record("a", 0.1, iterations=3, seconds=1800.0),
               trial_record("b", 0.2, iterations=5, seconds=1800.0)]
    assert budget_used(records, cpus_per_trial=2, gpus_per_trial=0.5) == Budget(
        trials=2, epochs=8, trial_hours=1.0, cpu_hours=2.0, gpu_hours=0.5)


def test_pareto_records_trade_score_against_cost() -> None:
    records = [trial_record("big", 0.9, cost=512.0), trial_record("small", 0.8, cost=64.0),
               trial_record("worse", 0.7, cost=128.0), trial_record("nan", None, cost=32.0)]
    assert [r.trial_id for r in pareto_records(records, "max")] == ["big", "small"]


def test_summary_round_trips_through_summary_json(tmp_path: Path) -> None:
    trials = [trial_record("t0", 0.5, config={"loss": "multi_similarity", "lr": 1e-3}),
              trial_record("t1", 0.4, state="pruned", stopped_by="asha"),
              trial_record("t2", None, state="failed")]
    retrain = RetrainSummary(trial_id="t0", rank=1, seeds=[0, 1], test_metrics=[{}, {}],
                             mean={"map@r": 0.3}, ci95={"map@r": 0.01}, epochs=3, seconds=9.0)
    study_dir = make_study(tmp_path, metric="map@r", trials=trials, searched=["loss", "lr"],
                           best="t0", retrains=[retrain], repeats_answered=2)
    body = json.loads(study_dir.summary_json.read_text())
    assert body["format"] == 2
    assert body["trial_counts"] == {"completed": 1, "pruned": 1, "failed": 1}
    assert body["trials"][1]["state"] == "pruned" and body["trials"][1]["stopped_by"] == "asha"
    summary = read_summary(study_dir)
    assert summary is not None and summary.finished
    assert summary.trials == trials and summary.retrains == [retrain]
    assert summary.trial("t0").config == {"loss": "multi_similarity", "lr": 1e-3}
    assert summary.study.mode == "max" and summary.study.searched == ("loss", "lr")
    assert summary.repeats_answered == 2 and summary.best_trial == "t0"


def test_one_seed_has_no_interval_null_in_summary_json(tmp_path: Path) -> None:
    """Issue 35: summary.json gave "ci95": {"map@r": 0.0} for one seed; there is no interval."""
    one = RetrainSummary(trial_id="t0", rank=1, seeds=[0], test_metrics=[{"map@r": 0.3}],
                         mean={"map@r": 0.3}, ci95={"map@r": 0.0}, epochs=3)
    study_dir = make_study(tmp_path / "a", metric="map@r", trials=[trial_record("t0", 0.5)],
                           searched=["lr"], best="t0", retrains=[one])
    body = json.loads(study_dir.summary_json.read_text())
    assert body["retrains"][0]["ci95"] == {"map@r": None}
    assert read_summary(study_dir).retrains[0].ci95 == {"map@r": None}
    # A summary written before (0.0 for one seed) reads as no interval too; two seeds keep it.
    body["retrains"][0]["ci95"] = {"map@r": 0.0}
    study_dir.summary_json.write_text(json.dumps(body))
    assert read_summary(study_dir).retrains[0].ci95 == {"map@r": None}
    two = RetrainSummary(trial_id="t0", rank=1, seeds=[0, 1], test_metrics=[{}, {}],
                         mean={"map@r": 0.3}, ci95={"map@r": 0.0})
    assert two.ci95 == {"map@r": 0.0}  # two equal results: a real interval of width 0


def test_the_sets_scores_are_measured_on_round_trip_and_may_be_absent(tmp_path: Path) -> None:
    val = EvalSet(classes=12, images=240, queries=240)
    test = EvalSet(classes=60, images=1201, queries=1200)
    study_dir = make_study(tmp_path, metric="map@r", trials=[trial_record("t0", 0.5)],
                           searched=["lr"], best="t0", validation_set=val, test_set=test)
    body = json.loads(study_dir.summary_json.read_text())
    assert body["validation_set"] == {"classes": 12, "images": 240, "queries": 240, "folds": 1}
    assert body["test_set"]["queries"] == 1200
    summary = read_summary(study_dir)
    assert summary.validation_set == val and summary.test_set == test
    del body["validation_set"], body["test_set"]  # a summary written before they were
    study_dir.summary_json.write_text(json.dumps(body))
    summary = read_summary(study_dir)
    assert summary.validation_set is None and summary.test_set is None


def test_a_sets_queries_are_what_the_retrieval_metrics_average_over() -> None:
    """A class with one image has nothing of its class to retrieve: no query. Counted as the
    metrics (faiss) count ``num_queries``."""
    import numpy as np

    from dmlsearch.trainables.metrics.retrieval import retrieval_metrics

    labels = np.array([3, 0, 0, 3, 1, 0, 3, 3, 5])  # class 1 and 5: one image each
    sizes = EvalSet.of_labels(labels, [0, 1, 3])
    assert sizes == EvalSet(classes=3, images=8, queries=7)
    chosen = np.isin(labels, [0, 1, 3])
    embeddings = np.random.default_rng(0).normal(size=(int(chosen.sum()), 4))
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    measured = retrieval_metrics(embeddings.astype(np.float32), labels[chosen], ks=(1,))
    assert measured["num_queries"] == sizes.queries
    assert EvalSet.of([4, 1, 0, 6], [0, 3], folds=2) == EvalSet(2, 10, 10, folds=2)


def test_an_unfinished_search_has_no_summary_and_a_foreign_one_is_a_user_error(
        tmp_path: Path) -> None:
    study_dir = StudyDir(tmp_path)
    assert read_summary(study_dir) is None
    study_dir.summary_json.write_text(json.dumps({"metric": "map@r", "trials": []}))
    with pytest.raises(UserError, match="is not a summary this dmlsearch reads"):
        read_summary(study_dir)


def test_trial_states_read_from_older_names() -> None:
    old = TrialRecord.from_json({"trial_id": "a", "config": {}, "state": "stopped"})
    assert old.state is TrialState.PRUNED


def test_dominance_respects_each_objectives_direction() -> None:
    modes = ("max", "min")
    assert dominates((0.9, 64), (0.8, 128), modes)
    assert not dominates((0.9, 128), (0.8, 64), modes)  # a trade-off: neither dominates
    assert not dominates((0.8, 64), (0.8, 64), modes)  # equal points do not dominate
    assert dominates((0.8, 32), (0.8, 64), modes)


def test_front_of_a_known_set() -> None:
    points = [(0.90, 512), (0.85, 64), (0.88, 128), (0.80, 128), (0.85, 256), (0.90, 1024)]
    assert pareto_front(points, ("max", "min")) == [0, 2, 1]


values = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=25)


@given(values, st.sampled_from([("max", "min"), ("min", "min"), ("max", "max")]))
def test_front_is_exactly_the_non_dominated_set(points: list, modes: tuple) -> None:
    def better_or_equal(a: int, b: int, m: str) -> bool:
        return a >= b if m == "max" else a <= b

    expected = set()
    for i, p in enumerate(points):
        beaten = any(
            all(better_or_equal(q[k], p[k], modes[k]) for k in range(2)) and q != p
            for q in points
        )
        if not beaten:
            expected.add(i)
    front = pareto_front(points, modes)
    assert set(front) == expected
    assert front  # a non-empty set always has a non-dominated point
    firsts = [points[i][0] for i in front]
    assert firsts == sorted(firsts, reverse=modes[0] == "max")


def test_trajectory_is_the_best_completed_score_against_epochs_in_time_order() -> None:
    """Two trials at once interleave their epochs by time; a pruned trial spends epochs but
    never improves the best; in "min" mode lower is better."""
    records = [
        trial_record("a", 0.5, iterations=4, seconds=4.0, started=0.0),  # epochs at 1,2,3,4 s
        trial_record("b", 0.3, state="pruned", iterations=1, seconds=1.5, started=0.0),
        trial_record("c", 0.7, iterations=2, seconds=2.0, started=4.5),  # at 5.5, 6.5 s
        trial_record("d", 0.6, iterations=2, seconds=1.0, started=5.0),  # at 5.5 (tie), 6 s
        trial_record("e", 0.9, iterations=2, seconds=1.0, started=None),  # no time: left out
    ]
    assert trajectory(records, "max") == [(5, 0.5), (8, 0.6), (9, 0.7)]
    assert trajectory(records, "min") == [(5, 0.5)]
    assert trajectory([], "max") == []
