"""The driver picks and lists trials in the metric's direction: lowest EER, highest recall."""

from __future__ import annotations

from dmlsearch.search.driver import _best
from dmlsearch.search.ray_backend import TrialRecord
from dmlsearch.search.summary import trial_rows


def _record(trial_id: str, score: float | None, state: str = "completed") -> TrialRecord:
    return TrialRecord(trial_id=trial_id, config={}, state=state, reason=None, iterations=1,
                       score=score, last_result={}, seconds=1.0)


RECORDS = [_record("a", 0.2), _record("b", 0.0), _record("c", None), _record("d", 0.5),
           _record("e", -1.0, state="failed")]


def test_best_trial_is_the_lowest_eer_or_the_highest_recall() -> None:
    assert _best(RECORDS, "eer_e2e").trial_id == "b"  # 0.0 is a score, not "missing"
    assert _best(RECORDS, "recall@1").trial_id == "d"
    assert _best([_record("c", None)], "eer") is None


def test_summary_lists_the_best_trial_first() -> None:
    records = RECORDS[:4]
    assert [r[0] for r in trial_rows(records, "eer")[1]] == ["b", "a", "d", "c"]
    assert [r[0] for r in trial_rows(records, "map@r")[1]] == ["d", "a", "b", "c"]
