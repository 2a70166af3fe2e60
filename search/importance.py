"""Which hyperparameters mattered: fANOVA importance of a study's parameters and of their pairs.

What is computed, from the study's finished trials (Optuna states COMPLETE and PRUNED: an
early-stopped trial counts with its best-so-far score; failed and interrupted ones have none):

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
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from dmlsearch.search.plots import save_png
from dmlsearch.search.study_attrs import REPEAT_OF

__all__ = ["Analysis", "ImportanceReport", "analyse", "analyse_study", "write_plots"]

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
    trials: int
    analyses: list[Analysis]
    skipped: list[str]  # branches with too few trials, and why

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.study, "objective": self.objective, "trials": self.trials,
            "skipped": self.skipped,
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
                  objective: int = 0) -> ImportanceReport:
    """The common analysis and one per branch with ``min_trials`` trials or more."""
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    trials = [t for t in study.get_trials(deepcopy=False, states=states)
              if t.values is not None and len(t.values) > objective
              and math.isfinite(t.values[objective])
              and REPEAT_OF not in t.user_attrs]  # a repeat is its earlier trial's point again
    name = "objective" if len(study.directions) == 1 else f"objective {objective + 1}"
    analyses, skipped = [], []
    if len(trials) < 2:
        skipped.append(f"all trials: {len(trials)} finished trial(s); fANOVA needs at least 2")
        return ImportanceReport(study.study_name, name, len(trials), analyses, skipped)
    common = sorted(set.intersection(*(set(t.params) for t in trials)))
    if common:
        analyses.append(analyse(trials, common, name="common parameters", seed=seed,
                                objective=objective))
    groups: dict[tuple[str, ...], list[optuna.trial.FrozenTrial]] = {}
    for t in trials:
        groups.setdefault(tuple(sorted(t.params)), []).append(t)
    if len(groups) > 1:
        for params, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            label = _branch_label(params, common, members)
            if len(members) < min_trials:
                skipped.append(f"{label}: {len(members)} trials (needs {min_trials})")
                continue
            analyses.append(analyse(members, list(params), name=label, seed=seed,
                                    objective=objective))
    return ImportanceReport(study.study_name, name, len(trials), analyses, skipped)


def analyse(trials: Sequence[optuna.trial.FrozenTrial], params: list[str], *, name: str,
            seed: int = 0, objective: int = 0) -> Analysis:
    """fANOVA of ``trials`` (which all have ``params``) on those parameters."""
    values = np.array([t.values[objective] for t in trials], dtype=float)
    dists = {p: trials[0].distributions[p] for p in params}
    varying = [p for p in params if len({_plain(t.params[p]) for t in trials}) > 1]
    importance = _optuna_fanova(trials, varying, dists, seed, objective) if varying else {}
    main, pairs, marginals = _surrogate_anova(trials, varying, dists, values, seed)
    return Analysis(name=name, trials=len(trials), params=list(params), importance=importance,
                    main_effects=main, interactions=pairs, marginals=marginals)


def _optuna_fanova(trials: Sequence[optuna.trial.FrozenTrial], params: list[str],
                   dists: dict[str, Any], seed: int, objective: int) -> dict[str, float]:
    """Optuna's evaluator on an in-memory copy holding just these trials and parameters."""
    study = optuna.create_study()
    for t in trials:
        study.add_trial(optuna.trial.create_trial(
            params={p: t.params[p] for p in params}, distributions={p: dists[p] for p in params},
            value=t.values[objective]))
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
    from sklearn.ensemble import RandomForestRegressor

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


def write_plots(report: ImportanceReport, folder: Path, *, top: int = 3) -> list[Path]:
    """Per analysis: importance bars, an interaction heat map, marginal curves of the top
    parameters. PNGs in ``folder`` (created); their paths."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, a in enumerate(report.analyses):
        stem = f"{k:02d}_" + "".join(c if c.isalnum() else "_" for c in a.name)[:60]
        if a.importance:
            names = sorted(a.importance, key=a.importance.get)
            fig = Figure(figsize=(6, 0.4 * len(names) + 1.5))
            ax = fig.add_subplot()
            ax.barh(names, [a.importance[n] for n in names])
            ax.set_xlabel("fANOVA importance (fraction of variance)")
            ax.set_title(f"{a.name} ({a.trials} trials)")
            fig.tight_layout()
            paths.append(folder / f"{stem}_importance.png")
            save_png(fig, paths[-1])
        names = list(a.main_effects)
        if len(names) >= 2:
            matrix = np.zeros((len(names), len(names)))
            for (p, q), v in a.interactions.items():
                i, j = names.index(p), names.index(q)
                matrix[i, j] = matrix[j, i] = v
            for i, n in enumerate(names):
                matrix[i, i] = a.main_effects[n]
            fig = Figure(figsize=(1 + 0.6 * len(names) + 2, 1 + 0.6 * len(names)))
            ax = fig.add_subplot()
            image = ax.imshow(matrix, cmap="viridis")
            ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
            ax.set_yticks(range(len(names)), names, fontsize=7)
            fig.colorbar(image, ax=ax, label="fraction of variance")
            ax.set_title(f"{a.name}: main effects (diagonal), pairs")
            fig.tight_layout()
            paths.append(folder / f"{stem}_interactions.png")
            save_png(fig, paths[-1])
        ranked = sorted(a.main_effects, key=lambda n: -a.main_effects[n])[:top]
        if ranked:
            fig = Figure(figsize=(4 * len(ranked), 3.2))
            for i, n in enumerate(ranked):
                ax = fig.add_subplot(1, len(ranked), i + 1)
                xs, ys = a.marginals[n]
                if all(isinstance(v, (int, float)) for v in xs):
                    ax.plot(xs, ys, marker="o")
                    if isinstance(a.marginals[n][0][0], float) and min(xs) > 0 and \
                            max(xs) / min(xs) > 50:
                        ax.set_xscale("log")
                else:
                    ax.bar([str(v) for v in xs], ys)
                    ax.tick_params(axis="x", labelrotation=45, labelsize=7)
                ax.set_xlabel(n)
                ax.set_ylabel(f"mean predicted {report.objective}")
            fig.suptitle(f"{a.name}: marginal effect of the top parameters")
            fig.tight_layout()
            paths.append(folder / f"{stem}_marginals.png")
            save_png(fig, paths[-1])
    return paths
