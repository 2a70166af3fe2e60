"""A search's results folder, read back: what ``report`` and ``export`` work from.

``search.yaml`` (the resolved options, base settings, searched keys, code revision) and
``summary.json`` (every trial, the budget, the test metrics) are written by ``dmlsearch run``.
An interrupted search has no ``summary.json`` yet: its trials are read from Ray Tune's trial
folders (``ray/<experiment>/<trial>/``: ``params.json`` and the last line of ``result.json``),
which hold the same trial ids as MLflow, each trial's best epoch, and ``error.txt`` for a trial
that failed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import yaml

from dmlsearch.trainables.errors import UserError

__all__ = ["Results", "load_results", "ranked"]


@dataclasses.dataclass(frozen=True)
class Results:
    dir: Path
    resolved: dict[str, Any]  # search.yaml, or {}
    summary: dict[str, Any] | None  # summary.json; None while the search is unfinished
    trials: list[dict[str, Any]]  # trial_id, state, score, score_std, best_epoch, config
    metric: str | None

    @property
    def finished(self) -> bool:
        return self.summary is not None


def load_results(folder: Path) -> Results:
    """Read a results folder; a folder with neither ``summary.json`` nor Ray trial folders is
    a :class:`UserError`."""
    folder = Path(folder).expanduser().resolve()
    resolved = _search_yaml(folder)
    summary_file = folder / "summary.json"
    if summary_file.is_file():
        try:
            summary = json.loads(summary_file.read_text())
        except ValueError as exc:
            raise UserError(f"{summary_file} is not valid JSON ({exc}); it is written by "
                            "`dmlsearch run` when a search finishes") from None
        trials = [dict(t, config=t.get("config") or {}) for t in summary.get("trials") or []]
        return Results(folder, resolved, summary, trials, summary.get("metric"))
    trials = _ray_trials(_ray_folder(folder, resolved))
    if not trials:
        where = folder if folder.is_dir() else f"{folder} (no such folder)"
        raise UserError(
            f"no search results in {where}: expected summary.json (written when a search "
            "finishes) or Ray Tune's trial folders under ray/ (written while it runs); give the "
            "--out folder of a `dmlsearch run`")
    metric = (resolved.get("base") or {}).get("metric")
    if metric is None:  # no search.yaml: the trials' own setting
        from dmlsearch.spaces import config_from_sample

        try:
            metric = config_from_sample(trials[0]["config"]).get("metric")
        except ValueError as exc:
            raise UserError(f"trial {trials[0]['trial_id']} in {folder}: {exc}") from None
    return Results(folder, resolved, None, trials, metric)


def ranked(results: Results) -> list[dict[str, Any]]:
    """The trials with a finite score that did not fail, best first in the metric's direction
    (ties keep their order)."""
    from dmlsearch.trainables.metrics.names import metric_mode

    scored = [t for t in results.trials if t.get("state") != "failed"
              and isinstance(t.get("score"), (int, float)) and math.isfinite(t["score"])]
    sign = 1.0 if metric_mode(results.metric or "recall@1") == "min" else -1.0
    return sorted(scored, key=lambda t: sign * t["score"])


def _search_yaml(folder: Path) -> dict[str, Any]:
    try:
        body = yaml.safe_load((folder / "search.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return body if isinstance(body, dict) else {}


def _ray_folder(folder: Path, resolved: dict[str, Any]) -> Path:
    """Where Ray Tune kept the trials: ``<out>/ray``, or the search's own folder in the shared
    ``--storage`` folder it was given (a bucket, s3:// or gs://, is not read from here)."""
    storage = (resolved.get("options") or {}).get("storage")
    if isinstance(storage, str) and storage.strip() and "://" not in storage:
        return Path(storage) / folder.name
    return folder / "ray"


def _ray_trials(ray_folder: Path) -> list[dict[str, Any]]:
    trials = []
    for result_file in sorted(ray_folder.glob("*/*/result.json")):
        lines = [ln for ln in result_file.read_text().splitlines() if ln.strip()]
        params = result_file.parent / "params.json"
        if not lines or not params.is_file():
            continue
        try:
            last, config = json.loads(lines[-1]), json.loads(params.read_text())
        except ValueError:  # a line cut short by the crash
            continue
        if (result_file.parent / "error.txt").is_file():
            state = "failed"
        else:
            state = "completed" if last.get("trial_finished") else "unfinished"
        trials.append({"trial_id": str(last.get("trial_id") or result_file.parent.name),
                       "state": state, "score": last.get("score"),
                       "score_std": last.get("score_std"), "best_epoch": last.get("best_epoch"),
                       "config": config})
    return trials
