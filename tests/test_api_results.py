"""What the Python functions return, shown in one line each (a notebook's output cell), made
from hand-built outcomes; a real search's is checked in ``test_api.py``."""

from __future__ import annotations

from pathlib import Path

from dmlsearch import ComparisonResult
from dmlsearch import TrainResult
from dmlsearch.search.compare.comparison import ComparisonOutcome
from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.outcome import MethodOutcome
from dmlsearch.search.finish.retrain_runs import RetrainOutcome
from dmlsearch.search.finish.retrain_runs import SeedsOutcome


def _method(name: str, tests: list[dict[str, float]]) -> MethodOutcome:
    return MethodOutcome(name=name, space=name, source="", budget_planned={}, budget_used={},
                         fell_short=None, best_trial="t00", best_val=0.5, best_config={},
                         trajectory=[], seeds=list(range(len(tests))), test_metrics=tests,
                         study_dir=f"/r/{name}")


def test_a_comparison_shows_each_methods_mean_test_score() -> None:
    methods = [_method("multi_similarity", [{"map@r": 0.30}, {"map@r": 0.32}]),
               _method("proxy_anchor", [])]  # its retrain failed: no test
    comparison = Comparison(name="cmp", dataset="glyphs", metric="map@r", mode="max",
                            shared={}, methods=methods)
    result = ComparisonResult(folder=Path("/r"), outcome=ComparisonOutcome(
        comparison=comparison, folder=Path("/r"), report=Path("/r/comparison.md"),
        ranked=False))
    assert repr(result) == ("ComparisonResult('/r': test map@r multi_similarity 0.3100, "
                            "proxy_anchor -; report comparison.md)")


def test_a_training_shows_its_seeds_and_the_interval_of_its_metric() -> None:
    def outcome(seeds: list[int], ci: float) -> SeedsOutcome:
        runs = [RetrainOutcome(config={"metric": "eer"}, test_metrics={"eer": 0.1},
                               seconds=1.0, run_id=None) for _ in seeds]
        return SeedsOutcome(trial_id="t00", rank=1, seeds=seeds, runs=runs,
                            mean={"eer": 0.12345, "auc": 0.9}, ci95={"eer": ci, "auc": 0.0})

    assert repr(TrainResult(folder=Path("/t"), outcome=outcome([0, 1, 2], 0.01))) == (
        "TrainResult('/t': seeds [0, 1, 2]; test eer 0.1235 ± 0.0100)")
    assert repr(TrainResult(folder=Path("/t"), outcome=outcome([0], 0.0))) == (
        "TrainResult('/t': seeds [0]; test eer 0.1235)")
