"""Ray Tune's trial results as :class:`~dmlsearch.search.results.TrialRecord`: from the result
grid a finished ``Tuner.fit`` returns, and from the trial folders an interrupted search left
(``params.json``, the last line of ``result.json``, ``error.txt``). One mapping serves both.
Reads files and dicts only: no Ray import."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import TrialState

__all__ = ["COST", "METHOD_KEY", "SCORE", "read_trial_folders", "record_from_result",
           "short_reason"]

SCORE = "score"  # what a trial reports as its score so far (the scheduler's and Optuna's value)
COST = "cost"  # the --pareto cost a trial reports beside it
METHOD_KEY = "dmlsearch.method"  # a comparison's trial: which method's search proposed it


def record_from_result(last: Mapping[str, Any], *, config: Mapping[str, Any], trial_id: str,
                       state: TrialState, reason: str | None = None, path: str | None = None,
                       stopped_by: str | None = None,
                       scores: Iterable[Any] = ()) -> TrialRecord:
    """A trial's record from its last reported result (``last``), its configuration, and the
    score of every report in order (``scores``: its learning curve)."""
    score = last.get(SCORE)
    fits = sum(1 for k in last if k.startswith("fold") and k.endswith("_best"))
    stamp, total = last.get("timestamp"), last.get("time_total_s")
    best_epoch = last.get("best_epoch")
    return TrialRecord(
        trial_id=str(trial_id), config=dict(config), state=state,
        score=float(score) if isinstance(score, (int, float)) and math.isfinite(score) else None,
        score_std=_number(last.get("score_std")), fits=max(1, fits),
        best_epoch=(int(best_epoch) if isinstance(best_epoch, (int, float)) and best_epoch
                    else None),
        iterations=int(last.get("training_iteration", 0) or 0),
        seconds=float(total or 0.0), reason=reason,
        stopped_by=stopped_by if state is TrialState.PRUNED else None,
        cost=_number(last.get(COST)),
        started=float(stamp) - float(total) if isinstance(stamp, (int, float))
        and isinstance(total, (int, float)) else None,
        path=path, curve=[_number(v) for v in scores],
    )


def read_trial_folders(folders: list[Path]) -> list[TrialRecord]:
    """Records of the trials in Ray Tune trial folders (an interrupted search): ``completed``
    (its last result says so), ``failed`` (``error.txt``), else ``unfinished``."""
    records = []
    for folder in folders:
        lines = [ln for ln in (folder / "result.json").read_text().splitlines() if ln.strip()]
        params = folder / "params.json"
        if not lines or not params.is_file():
            continue
        try:
            config = json.loads(params.read_text())
        except ValueError:
            continue
        results = []
        for line in lines:
            try:
                results.append(json.loads(line))
            except ValueError:  # a line cut short by the crash
                break
        if not results:
            continue
        last = results[-1]
        error = folder / "error.txt"
        if error.is_file():
            state, reason = TrialState.FAILED, short_reason(error.read_text(errors="replace"))
        else:
            state = TrialState.COMPLETED if last.get("trial_finished") else TrialState.UNFINISHED
            reason = None
        records.append(record_from_result(
            last, config=config, trial_id=str(last.get("trial_id") or folder.name),
            state=state, reason=reason, path=str(folder),
            scores=[r.get(SCORE) for r in results]))
    return records


def short_reason(text: str) -> str:
    """The line of an error text that says what went wrong (``TrialFailed: loss became nan``)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "Failed" in line or "Exception" in line:
            return line[:500]
    return (lines[-1] if lines else "unknown error")[:500]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
