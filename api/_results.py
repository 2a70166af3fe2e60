"""What the Python functions return: a finished search, comparison or training, typed, with the
paths of its files (the same files the command line writes)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:  # pandas, the searches' types: only when a result is used
    import pandas

    from dmlsearch.search.compare.comparison import ComparisonOutcome
    from dmlsearch.search.finish.retrain_runs import SeedsOutcome
    from dmlsearch.search.results import Summary

__all__ = ["ComparisonResult", "SearchResult", "TrainResult"]


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


@dataclasses.dataclass(frozen=True, repr=False)
class SearchResult:
    """A search (``dmlsearch run``/``resume``), as its results folder ``folder`` holds it."""

    folder: Path
    summary: Summary  # summary.json, read

    def __repr__(self) -> str:
        """One line, as a notebook shows it: what was searched, how the trials ended, the pick
        and its test (``summary`` holds the rest)."""
        from dmlsearch.search.reporting.sections import states_text

        study = self.summary.study
        parts = [f"{study.space} on {study.dataset}", states_text(self.summary)]
        best = self.summary.trial(self.summary.best_trial)
        if best is not None:
            parts.append(f"best {best.name} val {study.metric} {_score(best.score)}")
        test = self.test_metrics or {}
        if study.metric in test:
            parts.append(f"test {study.metric} {_score(test[study.metric])}")
        return f"SearchResult({str(self.folder)!r}: {'; '.join(parts)})"

    @property
    def best_trial(self) -> str | None:
        """The trial whose configuration was picked (None when no trial trained to its end)."""
        return self.summary.best_trial

    @property
    def best_config(self) -> dict[str, Any] | None:
        """The picked trial's settings (every setting of a trial, searched or fixed)."""
        trial = self.summary.trial(self.summary.best_trial)
        return None if trial is None else dict(trial.config)

    @property
    def best_score(self) -> float | None:
        """Its validation score (the study's metric; the best epoch's)."""
        trial = self.summary.trial(self.summary.best_trial)
        return None if trial is None else trial.score

    @property
    def test_metrics(self) -> dict[str, float] | None:
        """The picked configuration's retrain, tested once on the test classes."""
        return self.summary.test_metrics

    @property
    def metric(self) -> str:
        return self.summary.study.metric

    @property
    def trials(self) -> pandas.DataFrame:
        """One row per trial: ``trial`` (its one name, ``t07``: the study's trial 7, as the
        terminal, MLflow and the report say it), ``trial_id`` (Ray's), ``state`` (completed,
        pruned, failed), ``score``, ``epochs`` trained, ``seconds``, ``reason`` (a failure's),
        then one column per searched setting."""
        import pandas

        searched = list(self.summary.study.searched)
        rows = [{"trial": t.name, "trial_id": t.trial_id, "state": t.state.value,
                 "score": t.score,
                 "epochs": t.iterations, "seconds": t.seconds, "reason": t.reason,
                 **{key: t.config.get(key) for key in searched}}
                for t in self.summary.trials]
        columns = ["trial", "trial_id", "state", "score", "epochs", "seconds", "reason",
                   *searched]
        return pandas.DataFrame(rows, columns=columns)

    @property
    def export(self) -> Path | None:
        """The best configuration as a file ``dmlsearch train`` (or :func:`dmlsearch.train`)
        trains; None when the search retrained nothing."""
        return None if self.summary.export is None else Path(self.summary.export)

    @property
    def registered_model(self) -> str | None:
        """``name/version`` in the MLflow Model Registry (``models:/name/version``)."""
        return self.summary.registered_model

    @property
    def tracking_uri(self) -> str | None:
        return self.summary.tracking_uri

    @property
    def summary_json(self) -> Path:
        return self.folder / "summary.json"


@dataclasses.dataclass(frozen=True, repr=False)
class ComparisonResult:
    """A comparison (``dmlsearch compare``): each method's search, retrains and the tests."""

    folder: Path
    outcome: ComparisonOutcome

    def __repr__(self) -> str:
        """One line: each method's mean test score of the comparison's metric."""
        metric = self.outcome.comparison.metric
        methods = []
        for m in self.outcome.comparison.methods:
            values = [seed[metric] for seed in m.test_metrics if metric in seed]
            mean = sum(values) / len(values) if values else None
            methods.append(f"{m.name} {_score(mean)}")
        return (f"ComparisonResult({str(self.folder)!r}: test {metric} "
                f"{', '.join(methods)}; report {self.report.name})")

    @property
    def report(self) -> Path:
        """comparison.md: the table of methods, the paired tests, the pictures."""
        return self.outcome.report

    @property
    def ranked(self) -> bool:
        """At least two methods have test metrics, so they were compared."""
        return self.outcome.ranked

    @property
    def methods(self) -> pandas.DataFrame:
        """One row per method: its name, its best validation score, the trials it ran, and the
        picked configuration's test metrics (mean over the retrain seeds)."""
        import pandas

        rows = []
        for method in self.outcome.comparison.methods:
            row: dict[str, Any] = {"method": method.name, "best_val": method.best_val,
                                   "trials": method.budget_used.get("trials"),
                                   "seeds": len(method.test_metrics)}
            keys = {k for seed in method.test_metrics for k in seed}
            for key in sorted(keys):
                values = [seed[key] for seed in method.test_metrics if key in seed]
                row[f"test_{key}"] = sum(values) / len(values)
            rows.append(row)
        return pandas.DataFrame(rows)

    def search(self, method: str) -> SearchResult:
        """One method's search, read back from its folder."""
        from dmlsearch.search.readback import load_summary

        for outcome in self.outcome.comparison.methods:
            if outcome.name == method:
                folder, summary = load_summary(outcome.study_dir)
                return SearchResult(folder=folder.path, summary=summary)
        names = ", ".join(m.name for m in self.outcome.comparison.methods)
        raise KeyError(f"no method {method!r} in this comparison; its methods: {names}")


@dataclasses.dataclass(frozen=True, repr=False)
class TrainResult:
    """``dmlsearch train``: a configuration retrained with one or more seeds."""

    folder: Path
    outcome: SeedsOutcome

    def __repr__(self) -> str:
        """One line: the seeds and the configuration's metric, mean ± 95% interval."""
        metric = str(self.outcome.runs[0].config.get("metric", ""))
        score = ""
        if metric in self.outcome.mean:
            score = f"; test {metric} {_score(self.outcome.mean[metric])}"
            if len(self.outcome.seeds) > 1:
                score += f" ± {self.outcome.ci95.get(metric, 0.0):.4f}"
        return f"TrainResult({str(self.folder)!r}: seeds {list(self.outcome.seeds)}{score})"

    @property
    def test_metrics(self) -> dict[str, float]:
        """The first seed's test metrics (the configuration's own seed)."""
        return dict(self.outcome.runs[0].test_metrics)

    @property
    def mean(self) -> dict[str, float]:
        return dict(self.outcome.mean)

    @property
    def seeds(self) -> list[int]:
        return list(self.outcome.seeds)
