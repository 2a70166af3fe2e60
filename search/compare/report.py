"""What ``dmlsearch compare`` writes and shows: its files (``comparison.json``,
``comparison.md``, two pictures), the closing summary on the terminal and the comparison run's
MLflow metrics. The parts are :mod:`.analysis` (the numbers), :mod:`.comparison_json`,
:mod:`.comparison_md` and :mod:`.figures`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

from dmlsearch.search.compare.analysis import analyse
from dmlsearch.search.compare.analysis import metric_label
from dmlsearch.search.compare.comparison_json import comparison_dict
from dmlsearch.search.compare.comparison_md import render_markdown
from dmlsearch.search.compare.figures import budget_figure
from dmlsearch.search.compare.figures import metric_figure
from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.stats import method_values
from dmlsearch.search.compare.stats import named_verdict
from dmlsearch.search.study_dir import ComparisonDir
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.search.tracking import browse_command
from dmlsearch.search.tracking import browse_urls
from dmlsearch.search.tracking import metric_name

__all__ = ["ReportFiles", "closing_text", "comparison_metrics", "write_report"]


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    """Where :func:`write_report` writes each part."""

    json: Path
    markdown: Path
    metric_png: Path
    budget_png: Path

    @classmethod
    def in_folder(cls, folder: Path) -> ReportFiles:
        """The default names, in ``folder``."""
        folder = Path(folder)
        return cls(json=folder / "comparison.json", markdown=folder / "comparison.md",
                   metric_png=folder / "comparison_metric.png",
                   budget_png=folder / "comparison_budget.png")

    @classmethod
    def of(cls, folder: ComparisonDir) -> ReportFiles:
        """A comparison's results folder's names (:class:`ComparisonDir`)."""
        return cls(json=folder.comparison_json, markdown=folder.comparison_md,
                   metric_png=folder.metric_png, budget_png=folder.budget_png)


def write_report(comparison: Comparison, files: ReportFiles, *,
                 comparisons: Sequence[Comparison] | None = None, test: str = "t",
                 resamples: int = 100_000, seed: int = 0) -> ReportFiles:
    """Write ``comparison.json``, ``comparison.md`` and the two pictures where ``files`` says
    (text atomically, pictures with ``save_png``); ``comparisons`` (several experiments, this
    one usually among them) adds the tournament to the Markdown. Returns ``files``."""
    analysis = analyse(comparison, test=test, resamples=resamples, seed=seed)
    metric_figure(analysis, files.metric_png)
    budget_figure(analysis, files.budget_png)
    base = Path(files.markdown).parent
    text = render_markdown(
        analysis, comparisons=comparisons,
        metric_png=Path(os.path.relpath(files.metric_png, base)).as_posix(),
        budget_png=Path(os.path.relpath(files.budget_png, base)).as_posix())
    write_atomic(files.json, json.dumps(comparison_dict(analysis), indent=2, allow_nan=False,
                                        default=str) + "\n")
    write_atomic(files.markdown, text)
    return files




def comparison_metrics(comparison: Comparison) -> dict[str, float]:
    """The comparison run's metrics: each method's mean test metric and best validation
    score (``<method>.test_mean_<metric>``), columns of the MLflow runs table."""
    out: dict[str, float] = {}
    for m in comparison.methods:
        if m.best_val is not None:
            out[f"{m.name}.best_val_{metric_name(comparison.metric)}"] = m.best_val
        keys = dict.fromkeys(k for t in m.test_metrics for k in t)
        for key in keys:
            values = method_values(m, key)
            if values:
                out[f"{m.name}.test_mean_{metric_name(key)}"] = sum(values) / len(values)
    return out


def closing_text(comparison: Comparison, files: ReportFiles, *, folder: Path, uri: str,
                 experiment_id: str, ray_log: Path | None, seconds: float) -> str:
    """The terminal's closing summary: the ranking with intervals, the budget each method used,
    which differences are real, and where everything is."""
    analysis = analyse(comparison, seed=0)
    metric = comparison.metric
    lines = ["", f"Comparison finished in {seconds:.0f} s. Test {metric_label(metric)} of each "
             f"method's best configuration, retrained with seeds {analysis.seeds} "
             "(mean ± 95% interval):"]
    for r in analysis.ranking:
        stat = analysis.stats[r.method][metric]
        interval = "" if stat.half_width is None else f" ± {stat.half_width:.4f}"
        tie = "" if not r.tied else f"  (group {r.group}: cannot be told apart from " \
            + ", ".join(o.method for o in analysis.ranking
                        if o.group == r.group and o.method != r.method) + ")"
        method = next(m for m in comparison.methods if m.name == r.method)
        used = method.budget_used
        lines.append(f"  {r.rank}. {r.method:20s} {stat.mean:.4f}{interval}   "
                     f"{used['epochs']:.0f} epochs in {used['trials']:.0f} trials{tie}")
    for m in comparison.methods:
        if analysis.rank_of(m.name) is None:
            lines.append(f"  -  {m.name:20s} no test result (no trial trained to its end, or "
                         "its retrain failed)")
        if m.fell_short:
            lines.append(f"     {m.name} fell short of its budget: {m.fell_short}")
    pairs = [p for p in analysis.pairs if p.metric == metric]
    if pairs:
        lines.append(f"Paired by seed ({analysis.test} test, Holm-corrected):")
        for p in pairs:
            lines.append(f"  {p.a} - {p.b}: {p.diff:+.4f}, p_holm "
                         f"{'-' if p.p_holm is None else f'{p.p_holm:.3g}'}: "
                         f"{named_verdict(p, comparison.mode)}")
    urls = browse_urls(uri, experiment_id, comparison.mode)
    lines += [f"Report: {files.markdown}", f"Results: {folder} (one folder per method)"]
    if ray_log is not None:
        lines.append(f"Ray Tune's own output and warnings: {ray_log}")
    lines += [f"Browse in MLflow:  {browse_command(uri)}",
              f"  then open the comparison: {urls[0]}"]
    return "\n".join(lines)
