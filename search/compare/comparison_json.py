"""``comparison.json``: the one owner of its format, written (:func:`comparison_dict`) and read
back (:func:`read_comparison`, for ``dmlsearch tournament``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dmlsearch.search.compare.analysis import Analysis
from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.outcome import MethodOutcome
from dmlsearch.search.compare.stats import verdict
from dmlsearch.search.study_dir import ComparisonDir
from dmlsearch.trainables.errors import UserError

__all__ = ["comparison_dict", "comparison_from_json", "read_comparison"]


def comparison_dict(analysis: Analysis) -> dict[str, Any]:
    """The content of ``comparison.json``: the comparison, per method its test means and 95%
    half-widths (every test metric all its seeds have), its rank, group and tie by the main
    metric (None when it has no value of it), budget, best validation score and configuration;
    and every pair of methods on every reported metric (``diff`` = mean of a - b over seeds,
    its 95% interval, ``p``, ``p_holm`` over the pairs of that metric, the test and verdict).
    Non-finite numbers are None (JSON has no NaN)."""
    c = analysis.comparison
    methods = {}
    for m in c.methods:
        s = analysis.stats[m.name]
        r = analysis.rank_of(m.name)
        methods[m.name] = {
            "space": m.space,
            "source": m.source,
            "test_mean": {k: v.mean for k, v in s.items()},
            "test_ci95": {k: v.half_width for k, v in s.items()},
            "test_per_seed": [dict(t) for t in m.test_metrics],
            "rank": None if r is None else r.rank,
            "group": None if r is None else r.group,
            "tied": False if r is None else r.tied,
            "budget": {"planned": dict(m.budget_planned), "used": dict(m.budget_used),
                       "fell_short": m.fell_short},
            "best_trial": m.best_trial,
            "best_val": m.best_val,
            "best_config": dict(m.best_config),
            "study_dir": m.study_dir,
        }
    pairs = [{"a": p.a, "b": p.b, "metric": p.metric, "n": p.n, "diff": p.diff,
              "ci95": None if p.ci95 is None else [p.ci95[0], p.ci95[1]], "p": p.p,
              "p_holm": p.p_holm, "test": p.test,
              "verdict": verdict(p, analysis.mode_of(p.metric)), "note": p.note}
             for p in analysis.pairs]
    return _jsonable({"name": c.name, "dataset": c.dataset, "metric": c.metric, "mode": c.mode,
                      "shared": dict(c.shared), "seeds": list(analysis.seeds),
                      "methods": methods, "pairs": pairs})


def _jsonable(value: Any) -> Any:
    """``value`` with non-finite floats as None (JSON has no NaN or infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def comparison_from_json(body: dict[str, Any]) -> Comparison:
    """A :class:`Comparison` read back from its ``comparison.json`` (:func:`comparison_dict`):
    every method's per-seed test metrics, budget, best configuration; no search trajectory."""
    seeds = [int(s) for s in body.get("seeds") or []]
    methods = []
    for name, m in (body.get("methods") or {}).items():
        budget = m.get("budget") or {}
        tests = [{k: float(v) for k, v in t.items() if v is not None}
                 for t in m.get("test_per_seed") or []]
        methods.append(MethodOutcome(
            name=name, space=str(m.get("space") or ""), source=str(m.get("source") or ""),
            budget_planned=dict(budget.get("planned") or {}),
            budget_used=dict(budget.get("used") or {}), fell_short=budget.get("fell_short"),
            best_trial=m.get("best_trial"), best_val=m.get("best_val"),
            best_config=dict(m.get("best_config") or {}), trajectory=[],
            seeds=seeds if tests else [], test_metrics=tests,
            study_dir=str(m.get("study_dir") or "")))
    return Comparison(name=str(body["name"]), dataset=str(body["dataset"]),
                      metric=str(body["metric"]), mode=str(body["mode"]),
                      shared=dict(body.get("shared") or {}), methods=methods)


def read_comparison(folder: Path | str) -> Comparison:
    """The comparison a finished ``dmlsearch compare`` left in ``folder``; a user error if it
    has no ``comparison.json`` or not one this version wrote."""
    path = ComparisonDir(Path(folder).expanduser().resolve()).comparison_json
    if not path.is_file():
        raise UserError(f"no comparison.json in {folder}: expected the folder of a "
                        "finished `dmlsearch compare`; finish it with `dmlsearch resume "
                        f"{folder}` or leave it out")
    try:
        return comparison_from_json(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"{path} is not a comparison.json dmlsearch wrote ({exc}); "
                        "run the comparison again") from None
