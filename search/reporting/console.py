"""The terminal's closing summary of a search (after ``run`` and ``resume``), from its summary."""

from __future__ import annotations

from dmlsearch.search.reporting import sections
from dmlsearch.search.reporting.tables import counted
from dmlsearch.search.reporting.tables import format_metrics
from dmlsearch.search.results import Summary

__all__ = ["render_summary"]


def render_summary(summary: Summary, *, results: str, browse: str,
                   ray_log: str | None = None, urls: tuple[str, str] | None = None) -> str:
    """What a person reads when the search ends: the trials, the best one, its test metrics, the
    exported file and how to train it, where everything is and how to browse it."""
    budget = summary.budget
    head = (f"Search finished in {summary.seconds or 0:.0f} s: {sections.states_text(summary)}, "
            f"{counted(budget.epochs if budget else 0, 'epoch')} trained"
            f"{sections.budget_given(summary)}")
    if summary.repeats_answered:
        head += (f"; {summary.repeats_answered} proposal(s) repeated a trained configuration and "
                 "were answered from its result")
    if budget is not None:
        head += (f"; budget used {budget.cpu_hours:.2f} CPU-hours, "
                 f"{budget.gpu_hours:.2f} GPU-hours.")
    parts = ["", head, *sections.plan_lines(summary), "",
             sections.leaderboard(summary, params=False, unscored=True).text()]
    pareto = sections.pareto_line(summary)
    if pareto:
        parts += ["", pareto]
    parts += ["", *sections.early_stopping_lines(summary), *sections.intensify_lines(summary),
              sections.best_line(summary), *sections.trust_lines(summary)]
    if summary.test_metrics is not None and summary.study.replay is not None:
        parts += ["Replayed (nothing was trained): the test metrics the table recorded for the "
                  "best configuration's model at its best validation epoch:",
                  "  " + format_metrics(summary.test_metrics)]
    elif summary.test_metrics is not None:
        first = summary.retrains[0] if summary.retrains else None
        parts += [
            f"Retrained on all training classes for {first.epochs if first else '?'} epochs "
            f"({first.seconds if first else 0:.0f} s); {sections.test_heading(summary)}, "
            "evaluated once:",
            "  " + format_metrics(summary.test_metrics),
            *sections.not_comparable_lines(summary),
        ]
        table = sections.retrain_table(summary)
        if table is not None:
            parts += [f"Top {len(summary.retrains)} by val {summary.study.metric}, retrained "
                      f"{sections.seeds_text(summary)}:", table.text()]
        parts += sections.ensemble_lines(summary)
        if summary.registered_model:
            parts.append(f"Registered in the MLflow Model Registry as {summary.registered_model} "
                         f"(input: {sections.model_input(summary)})")
        if summary.export:
            parts += [f"Exported configuration: {summary.export}",
                      f"  train it again with:  dmlsearch train {summary.export}"]
    parts += [f"Results: {results}"]
    if ray_log is not None:
        parts.append(f"Ray Tune's own output and warnings: {ray_log}")
    parts.append(f"Browse in MLflow:  {browse}")
    if urls is None:
        parts.append("  then open http://127.0.0.1:5000")
    else:
        parts += [f"  then open the study: {urls[0]}",
                  f"  or its trials, best first: {urls[1]}"]
    return "\n".join(parts)
