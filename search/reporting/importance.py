"""Which hyperparameters mattered: fANOVA importance of a study's parameters and of their pairs.

What is analysed, from trials at **one budget**: by default the trials that trained to their end
(Optuna state COMPLETE; a trial the scheduler stopped early has a score of another, smaller
budget, and mixing the two would explain which trials were stopped, not which settings are
good); with ``at_step`` (``dmlsearch importance --at-epoch E``), every trial that reached epoch E
(over all folds), by its score there. Failed trials have no score. With fewer than
``min_trials`` trials at that budget the report says so, and which epoch has enough, instead of
explaining noise; below :data:`TRIALS_PER_PARAM` trials per parameter, or when the surrogate
predicts the trials it was not fitted to poorly, it analyses and says why not to trust it.

**One measure**, the functional ANOVA of Hutter et al. (ICML 2014, "An efficient approach for
assessing hyperparameter importance"; the analysis MemVir's §4.4 uses), computed by
:mod:`.fanova`: a random forest is fitted to objective ~ parameters, each parameter on the
scale it is searched on (log for a log parameter, as the sampler draws it), and its variance
over the search space is split up. The **importance** of a parameter is its main effect (the
share of that variance it explains alone); the **interaction** of a pair is the share the two
explain together beyond their main effects. Both are fractions of the same total, so the
importances, the interactions and the higher-order rest share one scale and sum to 1 (up to
Monte Carlo error); the marginal curves drawn are the main effects' functions.

**Optuna's numbers differ**, by design: optuna-dashboard, and
``optuna.importance.get_param_importances`` from Optuna 5 on, use PED-ANOVA by default
(Watanabe et al., 2023: which parameters set the best 10% of the completed trials apart, a
different question, from however few completed trials there are), and Optuna's
``FanovaImportanceEvaluator`` (the default before Optuna 5) computes this decomposition exactly
on its trees but with log parameters on their linear scale, over the parameters every completed
trial shares; both rescale their numbers to sum to 1. :data:`OPTUNA_NOTE` says so in every
report. The tests check the decomposition against the analytic one of a known function, and the
importances, rescaled to sum to 1, against Optuna's evaluator on a space with no log parameter,
where the two compute the same quantity.

**Large studies**: a group of more than :data:`MAX_TRIALS` trials is analysed on a seeded random
sample of that many, said in the report (the forest's cost grows with the trials; the Monte
Carlo part does not).

**Conditional parameters** (a ``when:`` branch, e.g. the margin of one loss) exist only in some
trials, so no single analysis can hold them all. The analysis runs once on the parameters every
trial has (the *common* analysis: e.g. the loss, the learning rate, the embedding size), and once
per *branch*: the trials that share the same set of parameters (e.g. every MultiSimilarity trial)
are analysed on all of their parameters that vary there (the loss, one value in the branch, is
named as fixed, not listed with a zero). A branch needs ``min_trials`` trials.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import optuna

from dmlsearch.search.options import ImportanceOptions
from dmlsearch.search.reporting.fanova import scale_of
from dmlsearch.search.reporting.fanova import surrogate_anova
from dmlsearch.search.reporting.importance_plots import share
from dmlsearch.search.reporting.importance_plots import write_plots
from dmlsearch.search.reporting.importance_report import Analysis
from dmlsearch.search.reporting.importance_report import ImportanceReport
from dmlsearch.search.reporting.importance_report import plain as _plain
from dmlsearch.search.reporting.tables import Table
from dmlsearch.search.reporting.tables import counted
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.search.tracking import log_to_study
from dmlsearch.search.tune import load_study
from dmlsearch.trainables.errors import UserError

__all__ = ["OPTUNA_NOTE", "Analysis", "ImportanceReport", "analyse", "analyse_study",
           "importance_command", "objective_name", "render_importance", "skipped_line",
           "study_importance", "write_importance"]

MIN_TRIALS = ImportanceOptions.min_trials  # fewer at the budget: not analysed (--min-trials)
MAX_TRIALS = 500
SHOWN_PAIRS = 0.01  # pairs below this share are not listed

OPTUNA_NOTE = ("Optuna's own numbers differ: optuna-dashboard, and get_param_importances from "
               "Optuna 5 on, answer another question by default (PED-ANOVA: which parameters "
               "set the best 10% of the completed trials apart), from however few completed "
               "trials there are and never the pruned ones; Optuna's FanovaImportanceEvaluator "
               "(the default before Optuna 5) computes this same decomposition with log "
               "parameters such as lr on a linear scale; both rescale their numbers to sum to "
               "1.")


def objective_name(study: optuna.Study, metric: str | None, objective: int = 0) -> str:
    """What the analysis explains: ``validation <metric>``, else Optuna's objective number."""
    if metric and len(study.directions) == 1:
        return f"validation {metric}"
    return "objective" if len(study.directions) == 1 else f"objective {objective + 1}"


def analyse_study(study: optuna.Study, *, min_trials: int = MIN_TRIALS, seed: int = 0,
                  objective: int = 0, at_step: int | None = None,
                  metric: str | None = None) -> ImportanceReport:
    """The common analysis and one per branch with ``min_trials`` trials or more, of the
    completed trials (or, with ``at_step``, of every trial's score at that step)."""
    trials, budget, left_out = _evaluations(study, objective, at_step)
    analyses: list[Analysis] = []
    skipped: list[str] = []
    deepest = _deepest_step(study, objective, min_trials)

    def report() -> ImportanceReport:
        return ImportanceReport(study.study_name, objective_name(study, metric, objective),
                                len(trials), analyses, skipped, budget=budget,
                                left_out=left_out, deepest=deepest)

    if len(trials) < min_trials:
        skipped.append(f"{counted(len(trials), 'trial')} at {budget}, "
                       f"needs {min_trials}")
        return report()
    common = sorted(set.intersection(*(set(t.params) for t in trials)))
    if common:
        analyses.append(analyse(trials, common, name="common parameters", seed=seed))
    groups: dict[tuple[str, ...], list[optuna.trial.FrozenTrial]] = {}
    for t in trials:
        groups.setdefault(tuple(sorted(t.params)), []).append(t)
    if len(groups) > 1:
        for params, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            label = _branch_label(params, common, members)
            if len(members) < min_trials:
                count = counted(len(members), 'trial')
                skipped.append(f"{label}: {count} (needs {min_trials})")
                continue
            analyses.append(analyse(members, list(params), name=label, seed=seed))
    return report()


def _evaluations(study: optuna.Study, objective: int, at_step: int | None,
                 ) -> tuple[list[optuna.trial.FrozenTrial], str, dict[str, int]]:
    """The trials analysed, each with the one value analysed; the budget; what was left out."""
    states = optuna.trial.TrialState
    chosen, left_out = [], {}
    for t in study.get_trials(deepcopy=False):
        if at_step is None:
            value = (t.values[objective] if t.state == states.COMPLETE and t.values is not None
                     and len(t.values) > objective else None)
        else:
            value = t.intermediate_values.get(at_step) if t.state in (
                states.COMPLETE, states.PRUNED) else None
        if value is None or not math.isfinite(value):
            left_out[t.state.name.lower()] = left_out.get(t.state.name.lower(), 0) + 1
            continue
        chosen.append(optuna.trial.create_trial(params=t.params, distributions=t.distributions,
                                                value=float(value)))
    return chosen, "full budget" if at_step is None else f"epoch {at_step}", left_out


def _deepest_step(study: optuna.Study, objective: int,
                  min_trials: int) -> tuple[int, int] | None:
    """The deepest epoch with a finite score of ``min_trials`` trials or more, and their count
    (single-objective studies: Optuna keeps intermediate values for one objective only)."""
    if objective != 0 or len(study.directions) != 1:
        return None
    counts: dict[int, int] = {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                      optuna.trial.TrialState.PRUNED)):
        for step, value in t.intermediate_values.items():
            if value is not None and math.isfinite(value):
                counts[step] = counts.get(step, 0) + 1
    enough = [s for s, n in counts.items() if n >= min_trials]
    return (max(enough), counts[max(enough)]) if enough else None


def analyse(trials: Sequence[optuna.trial.FrozenTrial], params: list[str], *, name: str,
            seed: int = 0, max_trials: int = MAX_TRIALS) -> Analysis:
    """fANOVA of ``trials`` (which all have ``params``; their value is what is analysed) on
    those of ``params`` that vary; of a seeded random ``max_trials`` of them when there are
    more."""
    sampled_from = None
    if len(trials) > max_trials:
        sampled_from = len(trials)
        chosen = np.random.default_rng(seed).choice(len(trials), size=max_trials, replace=False)
        trials = [trials[i] for i in sorted(chosen)]
    values = np.array([t.value for t in trials], dtype=float)
    dists = {p: trials[0].distributions[p] for p in params}
    varying = [p for p in params if len({_plain(t.params[p]) for t in trials}) > 1]
    fixed = {p: _plain(trials[0].params[p]) for p in params if p not in varying}
    main, pairs, marginals, r2 = surrogate_anova(trials, varying, dists, values, seed)
    return Analysis(name=name, trials=len(trials), params=varying, importance=main,
                    interactions=pairs, marginals=marginals,
                    scales={p: scale_of(dists[p]) for p in varying}, fixed=fixed, fit_r2=r2,
                    observed={p: [_plain(t.params[p]) for t in trials] for p in varying},
                    sampled_from=sampled_from)


def _branch_label(params: tuple[str, ...], common: list[str],
                  members: list[optuna.trial.FrozenTrial]) -> str:
    """``loss=multi_similarity`` when the branch's common categoricals pin it, else its params."""
    pinned = [f"{p}={_plain(members[0].params[p])}" for p in common
              if isinstance(members[0].distributions[p],
                            optuna.distributions.CategoricalDistribution)
              and len({_plain(t.params[p]) for t in members}) == 1]
    extra = [p for p in params if p not in common]
    return "branch " + (", ".join(pinned) if pinned else "+".join(extra) or "all")


def render_importance(report: ImportanceReport, *, pairs: int = 8) -> str:
    """The tables a person reads: per analysis its trials, caveats, importances and pairs; what
    the numbers are and how they relate to Optuna's, said below them."""
    parts = [f"Importance of {report.objective} (fANOVA) in study {report.study}: "
             f"{report.trials} trials at {report.budget}" + _left_out(report)]
    for a in report.analyses:
        sample = f", a random {a.trials} of {a.sampled_from}" if a.sampled_from else ""
        fixed = ("; fixed here: " + ", ".join(f"{k}={v}" for k, v in a.fixed.items())
                 if a.fixed else "")
        parts += ["", f"{a.name}: {a.trials} trials at {report.budget}{sample}{fixed}"]
        if not a.params:
            parts.append("no parameter varies in these trials: nothing to explain")
            continue
        if a.caveats:
            parts.append(textwrap.fill(
                "caveat: " + "; ".join(a.caveats) + ": read the order as a hint, not the "
                "numbers as a measurement", 100, subsequent_indent="  "))
        rows = [[p, share(a.importance.get(p, 0.0)), a.scales.get(p, "")]
                for p in sorted(a.params, key=lambda p: -a.importance.get(p, 0.0))]
        parts.append(Table(["parameter", "importance", "scale"], rows).text())
        top = [kv for kv in sorted(a.interactions.items(), key=lambda kv: -kv[1])
               if kv[1] >= SHOWN_PAIRS][:pairs]
        if top:
            parts += ["", Table(["pair", "interaction"],
                                [[f"{p} x {q}", share(v)] for (p, q), v in top]).text()]
        alone, together = sum(a.importance.values()), sum(a.interactions.values())
        parts.append(f"explained by the parameters alone: {share(alone)}; by pairs: "
                     f"{share(together)}; by three or more together: "
                     f"{share(max(0.0, 1 - alone - together))}")
    for line in report.skipped:
        parts.append(f"not analysed: {line}")
    meaning = (f"importance: the share of the variance of {report.objective} that a parameter "
               "explains alone, as a random forest fitted to these trials predicts it over the "
               "search space (log parameters on their log scale); interaction: the share two "
               "explain together beyond that (fANOVA, Hutter et al. 2014).")
    parts += ["", textwrap.fill(meaning, 100), textwrap.fill(OPTUNA_NOTE, 100)]
    return "\n".join(parts)


def _left_out(report: ImportanceReport) -> str:
    if not report.left_out:
        return ""
    words = {"complete": "completed", "fail": "failed"}
    without = {"pruned": "stopped before", "complete": "no score at"}
    return " (left out: " + ", ".join(
        f"{n} {words.get(state, state)} trial{'s' if n != 1 else ''}"
        + (f", {without[state]} {report.budget}" if state in without else "")
        for state, n in sorted(report.left_out.items())) + ")"


def study_importance(study_dir: StudyDir, *, min_trials: int = MIN_TRIALS,
                     at_epoch: int | None = None, metric: str | None = None) -> ImportanceReport:
    """The analysis of a results folder's study, explaining its metric (from ``search.yaml``
    unless given)."""
    if metric is None:
        base = study_dir.read_resolved().get("base") or {}
        metric = base.get("metric") if isinstance(base.get("metric"), str) else None
    return analyse_study(load_study(study_dir), min_trials=min_trials, at_step=at_epoch,
                         metric=metric)


def skipped_line(report: ImportanceReport, folder: Path | str) -> str:
    """Why nothing was analysed, and what would analyse something, in one line."""
    advice = report.advice(folder)
    return "; ".join(report.skipped) + (f"; {advice}" if advice else "")


def importance_command(results: Path, *, min_trials: int = MIN_TRIALS,
                       at_epoch: int | None = None,
                       echo: Callable[[str], None] = print) -> int:
    """``dmlsearch importance DIR``: analyse the study (its completed trials, or every trial at
    epoch ``at_epoch``), print the tables, save the JSON and the pictures in ``importance/``,
    and log them to the study's MLflow run. ``min_trials`` and ``at_epoch`` are checked against
    the options table's ranges (``--min-trials``, ``--at-epoch``), as the command line's are."""
    opts = ImportanceOptions(results=Path(results), min_trials=min_trials, at_epoch=at_epoch)
    opts.check()
    min_trials, at_epoch = opts.min_trials, opts.at_epoch
    study_dir = StudyDir.of_search(results)
    report = study_importance(study_dir, min_trials=min_trials, at_epoch=at_epoch)
    if not report.analyses:
        raise UserError(f"nothing to analyse in {study_dir.path}: "
                        + skipped_line(report, study_dir.path))
    write_importance(report, study_dir)
    echo(render_importance(report))
    options = study_dir.read_resolved().get("options") or {}
    logged = study_dir.search_yaml.is_file() and log_to_study(
        options.get("mlflow_uri") or study_dir.default_tracking_uri, study_dir.name,
        study_dir.importance)
    echo(f"\nSaved in {study_dir.importance}"
         + ("; logged to the study's MLflow run" if logged else ""))
    return 0


def write_importance(report: ImportanceReport, study_dir: StudyDir) -> list[Path]:
    """``importance/importance.json`` and the pictures (those of an earlier analysis, at
    another budget, removed first); the files written."""
    for old in study_dir.importance.glob("*.png") if study_dir.importance.is_dir() else []:
        old.unlink()
    paths = write_plots(report, study_dir.importance)
    write_atomic(study_dir.importance_json, json.dumps(report.to_json(), indent=2))
    return [study_dir.importance_json, *paths]
