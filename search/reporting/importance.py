"""Which hyperparameters mattered: fANOVA importance of a study's parameters and of their pairs.

What is computed, from trials at **one budget**: by default the trials that trained to their end
(Optuna state COMPLETE; a trial the scheduler stopped early has a score of another, smaller
budget, and mixing the two would explain which trials were stopped, not which settings are
good); with ``at_step`` (``dmlsearch importance --at-epoch E``), every trial that reached epoch E
(over all folds), by its score there. Failed trials have no score. With fewer than
``min_trials`` trials at that budget the report says so instead of explaining noise.

- **Single-parameter importance**: Optuna's ``FanovaImportanceEvaluator`` (Hutter et al., ICML
  2014, "An efficient approach for assessing hyperparameter importance"), the analysis MemVir's
  §4.4 uses; fractions of the variance of the objective, normalised to sum to 1.
- **Pairwise interactions and marginal curves**, which Optuna does not give: the same functional
  ANOVA on a random-forest surrogate (scikit-learn, 64 trees) of objective ~ parameters, with the
  marginals estimated by Monte Carlo: f_i(v) is the surrogate's mean prediction over ``background``
  random configurations with parameter i set to v; f_ij(v, w) likewise with two parameters set.
  The main effect of i is Var_v f_i(v), the interaction of (i, j) is Var(f_ij − f_i − f_j + f_0)
  over a grid of (v, w), each as a fraction of the surrogate's total variance. Numeric parameters
  are gridded over their range (log-spaced for log parameters), categorical ones over their
  choices.

**Conditional parameters** (a ``when:`` branch, e.g. the margin of one loss) exist only in some
trials, so no single analysis can hold them all. The analysis runs once on the parameters every
trial has (the *common* analysis: e.g. the loss, the learning rate, the embedding size), and once
per *branch*: the trials that share the same set of parameters (e.g. every MultiSimilarity trial)
are analysed on all of their parameters. A branch needs ``min_trials`` trials.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from sklearn.ensemble import RandomForestRegressor

from dmlsearch.search.reporting.importance_plots import write_plots
from dmlsearch.search.reporting.tables import Table
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.search.tracking import log_to_study
from dmlsearch.search.tune import load_study
from dmlsearch.trainables.errors import UserError

__all__ = ["Analysis", "ImportanceReport", "analyse", "analyse_study", "importance_command",
           "render_importance", "write_importance"]

MIN_TRIALS = 8
GRID = 12
BACKGROUND = 256


@dataclasses.dataclass(frozen=True)
class Analysis:
    """The importance analysis of one group of trials (the common one, or one branch)."""

    name: str
    trials: int
    params: list[str]
    importance: dict[str, float]  # Optuna's fANOVA, sums to 1
    main_effects: dict[str, float]  # surrogate functional ANOVA: fraction of variance
    interactions: dict[tuple[str, str], float]  # same, for pairs
    marginals: dict[str, tuple[list[Any], list[float]]]  # parameter -> (values, mean objective)


@dataclasses.dataclass(frozen=True)
class ImportanceReport:
    study: str
    objective: str
    trials: int  # analysed, at ``budget``
    analyses: list[Analysis]
    skipped: list[str]  # branches with too few trials, and why
    budget: str = "full budget"  # "full budget" (completed trials) or "epoch E"
    left_out: dict[str, int] = dataclasses.field(default_factory=dict)  # state -> trials

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.study, "objective": self.objective, "trials": self.trials,
            "budget": self.budget, "left_out": self.left_out, "skipped": self.skipped,
            "analyses": [{
                "name": a.name, "trials": a.trials, "params": a.params,
                "importance": a.importance, "main_effects": a.main_effects,
                "interactions": [{"params": list(k), "value": v}
                                 for k, v in sorted(a.interactions.items(),
                                                    key=lambda kv: -kv[1])],
                "marginals": {k: {"values": [_plain(x) for x in xs], "objective": ys}
                              for k, (xs, ys) in a.marginals.items()},
            } for a in self.analyses],
        }


def analyse_study(study: optuna.Study, *, min_trials: int = MIN_TRIALS, seed: int = 0,
                  objective: int = 0, at_step: int | None = None) -> ImportanceReport:
    """The common analysis and one per branch with ``min_trials`` trials or more, of the
    completed trials (or, with ``at_step``, of every trial's score at that step)."""
    trials, budget, left_out = _evaluations(study, objective, at_step)
    name = "objective" if len(study.directions) == 1 else f"objective {objective + 1}"
    analyses: list[Analysis] = []
    skipped: list[str] = []

    def report() -> ImportanceReport:
        return ImportanceReport(study.study_name, name, len(trials), analyses, skipped,
                                budget=budget, left_out=left_out)

    if len(trials) < min_trials:
        pruned = left_out.get("pruned", 0)
        hint = (f"; {pruned} trials were pruned: `dmlsearch importance --at-epoch E` analyses "
                "every trial at epoch E" if pruned and at_step is None else "")
        skipped.append(f"all trials: {len(trials)} at {budget} (needs {min_trials}){hint}")
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
                skipped.append(f"{label}: {len(members)} trials (needs {min_trials})")
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


def analyse(trials: Sequence[optuna.trial.FrozenTrial], params: list[str], *, name: str,
            seed: int = 0) -> Analysis:
    """fANOVA of ``trials`` (which all have ``params``; their value is what is analysed) on
    those parameters."""
    values = np.array([t.value for t in trials], dtype=float)
    dists = {p: trials[0].distributions[p] for p in params}
    varying = [p for p in params if len({_plain(t.params[p]) for t in trials}) > 1]
    importance = _optuna_fanova(trials, varying, dists, seed) if varying else {}
    main, pairs, marginals = _surrogate_anova(trials, varying, dists, values, seed)
    return Analysis(name=name, trials=len(trials), params=list(params), importance=importance,
                    main_effects=main, interactions=pairs, marginals=marginals)


def _optuna_fanova(trials: Sequence[optuna.trial.FrozenTrial], params: list[str],
                   dists: dict[str, Any], seed: int) -> dict[str, float]:
    """Optuna's evaluator on an in-memory copy holding just these trials and parameters."""
    study = optuna.create_study()
    for t in trials:
        study.add_trial(optuna.trial.create_trial(
            params={p: t.params[p] for p in params}, distributions={p: dists[p] for p in params},
            value=t.value))
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    return dict(optuna.importance.get_param_importances(study, evaluator=evaluator))


def _encode(dist: Any, value: Any) -> float:
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return float(dist.to_internal_repr(value))
    if getattr(dist, "log", False):
        return math.log(float(value))
    return float(value)


def _grid(dist: Any) -> tuple[list[Any], np.ndarray]:
    """Values of a parameter to set in the marginals: (as the user reads them, encoded)."""
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return list(dist.choices), np.arange(len(dist.choices), dtype=float)
    low, high = float(dist.low), float(dist.high)
    if dist.log:
        shown = np.geomspace(low, high, GRID)
        return [float(v) for v in shown], np.log(shown)
    shown = np.linspace(low, high, GRID)
    if isinstance(dist, optuna.distributions.IntDistribution):
        shown = np.unique(np.round(shown))
    return [_plain(v) for v in shown], shown.astype(float)


def _background(dists: list[Any], rng: np.random.Generator) -> np.ndarray:
    columns = []
    for dist in dists:
        _, encoded = _grid(dist)
        if isinstance(dist, optuna.distributions.CategoricalDistribution):
            columns.append(rng.integers(0, len(encoded), BACKGROUND).astype(float))
        else:
            columns.append(rng.uniform(encoded.min(), encoded.max(), BACKGROUND))
    return np.stack(columns, axis=1)


def _surrogate_anova(
    trials: Sequence[optuna.trial.FrozenTrial], params: list[str], dists: dict[str, Any],
    values: np.ndarray, seed: int,
) -> tuple[dict[str, float], dict[tuple[str, str], float], dict[str, tuple[list, list]]]:
    if not params:
        return {}, {}, {}

    x = np.array([[_encode(dists[p], t.params[p]) for p in params] for t in trials])
    forest = RandomForestRegressor(n_estimators=64, min_samples_leaf=1, random_state=seed)
    forest.fit(x, values)
    rng = np.random.default_rng(seed)
    back = _background([dists[p] for p in params], rng)
    total = float(np.var(forest.predict(back)))
    f0 = float(np.mean(forest.predict(back)))
    grids = [_grid(dists[p]) for p in params]
    singles: dict[int, np.ndarray] = {}
    for i, (_, enc) in enumerate(grids):
        rows = np.repeat(back[None], len(enc), axis=0)
        rows[:, :, i] = enc[:, None]
        singles[i] = forest.predict(rows.reshape(-1, len(params))).reshape(len(enc), -1).mean(1)
    main = {p: (float(np.var(singles[i])) / total if total > 0 else 0.0)
            for i, p in enumerate(params)}
    pairs: dict[tuple[str, str], float] = {}
    for i, j in itertools.combinations(range(len(params)), 2):
        ei, ej = grids[i][1], grids[j][1]
        rows = np.repeat(back[None], len(ei) * len(ej), axis=0)
        gi, gj = np.meshgrid(ei, ej, indexing="ij")
        rows[:, :, i] = gi.reshape(-1)[:, None]
        rows[:, :, j] = gj.reshape(-1)[:, None]
        fij = forest.predict(rows.reshape(-1, len(params))).reshape(len(ei), len(ej), -1).mean(2)
        residual = fij - singles[i][:, None] - singles[j][None, :] + f0
        pairs[(params[i], params[j])] = float(np.var(residual)) / total if total > 0 else 0.0
    marginals = {p: (grids[i][0], [float(v) for v in singles[i]]) for i, p in enumerate(params)}
    return main, pairs, marginals


def _branch_label(params: tuple[str, ...], common: list[str],
                  members: list[optuna.trial.FrozenTrial]) -> str:
    """``loss=multi_similarity`` when the branch's common categoricals pin it, else its params."""
    pinned = [f"{p}={_plain(members[0].params[p])}" for p in common
              if isinstance(members[0].distributions[p],
                            optuna.distributions.CategoricalDistribution)
              and len({_plain(t.params[p]) for t in members}) == 1]
    extra = [p for p in params if p not in common]
    return "branch " + (", ".join(pinned) if pinned else "+".join(extra) or "all")


def _plain(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value


def render_importance(report: ImportanceReport, *, pairs: int = 8) -> str:
    parts = [f"fANOVA importance of {report.objective} in study {report.study}: "
             f"{report.trials} trials at {report.budget}" + _left_out(report)]
    for a in report.analyses:
        rows = [[p, f"{a.importance.get(p, 0.0):.3f}", f"{a.main_effects.get(p, 0.0):.3f}"]
                for p in sorted(a.params, key=lambda p: -a.importance.get(p, 0.0))]
        parts += ["", f"{a.name} ({a.trials} trials)",
                  Table(["parameter", "importance", "main effect"], rows).text()]
        top = sorted(a.interactions.items(), key=lambda kv: -kv[1])[:pairs]
        if top:
            parts += ["", Table(["pair", "interaction"],
                                [[f"{p} x {q}", f"{v:.3f}"] for (p, q), v in top]).text()]
    for line in report.skipped:
        parts.append(f"not analysed: {line}")
    parts += ["", "importance: Optuna's fANOVA (fractions summing to 1); main effect and "
              "interaction: fraction of the variance of a random-forest surrogate "
              "(see search/reporting/importance.py)"]
    return "\n".join(parts)


def _left_out(report: ImportanceReport) -> str:
    if not report.left_out:
        return ""
    return " (left out: " + ", ".join(f"{n} {state}" for state, n in
                                      sorted(report.left_out.items())) + ")"


def importance_command(results: Path, *, min_trials: int = MIN_TRIALS,
                       at_epoch: int | None = None,
                       echo: Callable[[str], None] = print) -> int:
    """``dmlsearch importance DIR``: analyse the study (its completed trials, or every trial at
    epoch ``at_epoch``), print the tables, save the JSON and the pictures in ``importance/``,
    and log them to the study's MLflow run."""
    if min_trials < 2:
        raise UserError(f"--min-trials must be >= 2, got {min_trials}")
    if at_epoch is not None and at_epoch < 1:
        raise UserError(f"--at-epoch must be >= 1 (epochs over all folds), got {at_epoch}")
    study_dir = StudyDir.of_search(results)
    report = analyse_study(load_study(study_dir), min_trials=min_trials, at_step=at_epoch)
    if not report.analyses:
        raise UserError(f"nothing to analyse in {study_dir.path}: " + "; ".join(report.skipped))
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
    """``importance/importance.json`` and the pictures; the files written."""
    paths = write_plots(report, study_dir.importance)
    write_atomic(study_dir.importance_json, json.dumps(report.to_json(), indent=2))
    return [study_dir.importance_json, *paths]
