"""``dmlsearch report DIR``: one Markdown report of a search's results folder, ``report.md``.

Rendered from the search's summary (:func:`dmlsearch.search.readback.load_summary`: a finished
search's ``summary.json``, or an interrupted search's trial folders), with the importance
analysis when ``dmlsearch importance`` (or the search) wrote one, and for a grid study whose
trials vary the loss over several experiments the thesis's tournament (:mod:`.tournament`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from dmlsearch.search.options import ReportOptions
from dmlsearch.search.readback import load_summary
from dmlsearch.search.reporting import sections
from dmlsearch.search.reporting.tables import Table
from dmlsearch.search.reporting.tables import counted
from dmlsearch.search.reporting.tables import format_metrics
from dmlsearch.search.reporting.tournament import experiment_keys
from dmlsearch.search.reporting.tournament import hashable
from dmlsearch.search.reporting.tournament import tournament
from dmlsearch.search.results import Summary
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.study_dir import write_atomic

__all__ = ["render_report", "report_command"]


def render_report(study_dir: StudyDir, summary: Summary, *, top: int = ReportOptions.top) -> str:
    study = summary.study
    out = [f"# dmlsearch report: {study.name}", ""]
    if not summary.finished:
        out += ["**Interrupted search**: no summary.json (the search did not finish); trials "
                "read from Ray Tune's trial folders (ray/). `dmlsearch resume "
                f"{study_dir.path}` continues it.", ""]
    direction = ("lower is better, minimised" if study.mode == "min"
                 else "higher is better, maximised")
    out += [
        f"- space: {study.space}",
        f"- dataset: {study.dataset}",
        f"- protocol: {study.protocol}",
        f"- metric: val {study.metric} ({direction})",
        f"- sampler: {study.sampler}, scheduler: {study.scheduler}",
        f"- searched: {', '.join(study.searched) or '-'}",
        *(f"- {line}" for line in sections.sets_lines(summary)),
        f"- results: {study_dir.path}",
        *(f"- {line}" for line in sections.plan_lines(summary)),
        "", "## Budget used", "",
        *(f"- {line}" for line in sections.budget_lines(summary)),
    ]
    if summary.budget is None:
        out.append("- CPU/GPU-hours: not recorded (written in summary.json when a search "
                   "finishes)")
    board = sections.leaderboard(summary, top=top)
    full = sum(t.full_budget for t in summary.trials)
    scored = sum(t.scored for t in summary.trials)
    order = "highest" if study.mode == "max" else "lowest"
    out += ["", f"## Leaderboard (val {study.metric}, {order} first)", "",
            f"Ranked: the {full} trial(s) that trained to their end (numbered); listed after "
            "them, the trials stopped early, deepest first (their scores are of fewer epochs, "
            "so they are not ranked with the others).", "",
            board.markdown() if board.rows else "No trial produced a validation score."]
    if len(summary.trials) > scored:
        out += ["", f"{len(summary.trials) - scored} trial(s) without a score (failed or never "
                "reported) are not listed."]
    out += ["", *sections.early_stopping_lines(summary), *sections.trust_lines(summary)]
    out += ["", "## Best configuration", "", *_best_section(summary, study_dir)]
    out += ["", "## Importance", "", *_importance_lines(study_dir, full)]
    table = _tournament_section(summary)
    if table:
        out += ["", *table]
    return "\n".join(out) + "\n"


def _best_section(summary: Summary, study_dir: StudyDir) -> list[str]:
    if not any(t.scored for t in summary.trials):
        return ["No best configuration: no trial produced a validation score."]
    if summary.study.replay is not None:
        test = ("Test classes (replayed: the table's test metrics of the best configuration's "
                "model at its best validation epoch; nothing was retrained): ")
    else:
        test = (f"The {sections.test_heading(summary)}, evaluated once after retraining on all "
                "training classes: ")
    out = [sections.best_line(summary), "",
           test + (format_metrics(summary.test_metrics, ", ") if summary.test_metrics
                   else "not available (no retrain: the search was interrupted or ran with "
                   "--no-retrain)")]
    table = sections.retrain_table(summary)
    if table is not None:
        out += ["", f"Retrained on all training classes {sections.seeds_text(summary)}:", "",
                table.markdown()]
    if summary.registered_model:
        out += ["", f"Registered model: `{summary.registered_model}` in the MLflow Model "
                f"Registry (input: {sections.model_input(summary)}; output: the embedding)"]
    for line in sections.ensemble_lines(summary, ", "):
        out += ["", line]
    galleries = [
        (study_dir.retrievals_png, "retrievals", "What the retrained model retrieves on the test "
         "classes: each row is a test query (blue frame, with its AP@R and R-Precision) and its "
         "nearest test images by cosine, framed green when of the query's class and red when "
         "not; the first rows are a random sample of queries, the last the worst (lowest AP@R)."),
        (study_dir.hard_pairs_png, "hardest pairs", "The verification pairs its learned "
         "distance D gets most wrong (same class scored lowest, two classes scored highest):"),
        (study_dir.retrievals_top_png, "retrievals of the top configurations", "The same "
         "queries retrieved by each retrained configuration, side by side:"),
        (study_dir.trials_png, "test trials", "How the retrained speaker-verification model "
         "scores its test trials: the score distributions of same-speaker (green) and "
         "different-speaker (red) trials for each scoring, and their DET curves:"),
        (study_dir.hard_trials_png, "hardest trials", "The same-speaker trials it scores "
         "lowest and the different-speaker trials it scores highest, as log-mel spectrograms:"),
    ]
    for path, alt, line in galleries:  # linked relative to report.md
        if path.is_file():
            out += ["", line, "", f"![{alt}]({path.relative_to(study_dir.path).as_posix()})"]
    out += ["", f"Exported configuration: {summary.export} (train it again with `dmlsearch "
            f"train {summary.export}`)" if summary.export else "Exported configuration: none"]
    return out


def _importance_lines(study_dir: StudyDir, full: int, *, top: int = 5) -> list[str]:
    """The importance ``dmlsearch importance`` (or the search) saved; else why there is none:
    with fewer than its minimum of trials trained to their end (``full``), what the search's
    own attempt said (and which epoch has enough trials), not a command that would refuse."""
    from dmlsearch.search.reporting.importance import MIN_TRIALS

    path, folder = study_dir.importance_json, study_dir.path
    if not path.is_file():
        too_few = _too_few_for_importance(study_dir, full, MIN_TRIALS)
        if too_few is not None:
            return [f"Not computed: {too_few}."]
        return [f"Not computed yet: `dmlsearch importance {folder}` computes it (fANOVA)."]
    try:
        body = json.loads(path.read_text())
    except json.JSONDecodeError:
        return [f"{path} is not valid JSON; run `dmlsearch importance {folder}` again."]
    left = body.get("left_out") or {}
    lines = [f"fANOVA importance (the share of the variance of "
             f"{body.get('objective', 'the objective')} each parameter explains alone) over "
             f"{body.get('trials', '?')} trials at {body.get('budget', 'full budget')}"
             + (" (left out: " + ", ".join(f"{n} {s}" for s, n in sorted(left.items())) + ")"
                if left else "") + f"; from {path}:", ""]
    for a in body.get("analyses") or []:
        imp = a.get("importance") or {}
        best = sorted(imp.items(), key=lambda kv: -kv[1])[:top]
        caveats = a.get("caveats") or []
        lines.append(f"- {a.get('name')} ({a.get('trials')} trials): "
                     + ", ".join(f"{k} {v:.3f}" for k, v in best)
                     + (f" (caveat: {'; '.join(caveats)})" if caveats else ""))
    for line in body.get("skipped") or []:
        lines.append(f"- not analysed: {line}")
    return lines


def _too_few_for_importance(study_dir: StudyDir, full: int, needed: int) -> str | None:
    """With fewer than ``needed`` trials trained to their end (``full``), why fANOVA cannot
    run, as ``dmlsearch importance`` says it (read from the Optuna study: with too few trials
    nothing is fitted), or from the count alone when the study cannot be read (a folder copied
    without ``optuna.db``); None when the command would analyse the study."""
    from dmlsearch.search.reporting.importance import skipped_line
    from dmlsearch.search.reporting.importance import study_importance

    if full >= needed:
        return None
    try:
        report = study_importance(study_dir, min_trials=needed)
    except Exception:  # noqa: BLE001 - the count says as much
        return f"{counted(full, 'trial')} trained to their end, fANOVA needs {needed}"
    if report.analyses or not report.skipped:
        return None
    return skipped_line(report, study_dir.path)


def _tournament_section(summary: Summary) -> list[str]:
    study = summary.study
    if study.sampler != "grid" or "loss" not in study.searched:
        return []
    trials = [t for t in summary.trials if t.full_budget]  # one budget: trained to the end
    configs = [t.config for t in trials]
    if len({c.get("loss") for c in configs}) < 2:
        return []
    keys = experiment_keys(configs, study.searched, "loss")
    rows = [{**t.config, "_score": t.score} for t in trials]
    table = tournament(rows, group_keys=keys, item_key="loss", score_key="_score",
                       mode=study.mode)
    experiments = {tuple(hashable(r.get(k)) for k in keys) for r in rows}
    metric = study.metric
    if len(experiments) < 2 or not table:
        return []
    return [
        "## Tournament (Psomas 2020, Table 11)", "",
        f"Losses ranked within each of {len(experiments)} experiments (one per combination of "
        f"{', '.join(keys) or 'nothing'}) by val {metric} (1 = best, ties share the average "
        "rank), then by their mean rank over the experiments (std: population std).", "",
        Table(["#", "loss", "experiments", "rank sum", "mean rank", "std"],
              [[i, r["item"], r["experiments"], f"{r['sum']:g}", f"{r['mean']:.2f}",
                f"{r['std']:.2f}"] for i, r in enumerate(table, 1)]).markdown(),
    ]


def report_command(results: Path, *, top: int = ReportOptions.top,
                   echo: Callable[[str], None] = print) -> int:
    """``dmlsearch report DIR``: report.md of a search, written and shown; ``top`` is checked
    against the options table's range (``--top``), as the command line's is."""
    opts = ReportOptions(results=Path(results), top=top)
    opts.check()
    top = opts.top
    study_dir, summary = load_summary(results)
    text = render_report(study_dir, summary, top=top)
    write_atomic(study_dir.report_md, text)
    echo(text)
    echo(f"Saved in {study_dir.report_md}")
    return 0
