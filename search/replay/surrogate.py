"""The curve of any configuration of a *sampled* table: a surrogate model fitted on its
recorded curves, as YAHPO Gym and HPOBench serve continuous spaces from finite tables.

A table recorded with ``dmlsearch record-curves --sample N`` holds a spread sample of a space
with continuous ranges; a search asks for configurations between its points. Each is answered
with a whole learning curve predicted at once (every epoch's validation metric, the test metric
of the model a trial stopped at that epoch selects, the epoch's CPU seconds and training loss),
by extremely randomised trees (``sklearn.ensemble.ExtraTreesRegressor``, multi-output, seeded;
one model for the scores and one for the costs, :class:`_Trees`), fitted per branch of the
space (the curves with the same settings and the same value of each non-numeric one, e.g. each
loss with its own parameters). Inputs: each numeric setting in its own scale (log where the
recorded space, kept in the table's header, declares a ``log`` range), scaled to [0, 1] by the
table's range (a value outside it is clipped: the trees do not extrapolate); string settings
must match the branch.

Why these trees: they predicted held-out curves better than a random forest when they were
chosen, and they do better than the nearest recorded point and a distance-weighted
5-nearest-neighbour mean on every branch of the tables in ``benchmarks/curves/``
(:func:`held_out_fit`; numbers in docs/benchmarks.md), with a mean error about the noise
between two trainings of one configuration. Only seed-0 curves that trained to their end are
fitted (a failed training's region is not modelled: the tables' failure counts are in
docs/benchmarks.md). The prediction is the mean over trees: smoother than any one training, so
a replayed search sees no seed noise unless it asks for it (:mod:`.noise`: the mean plus noise
fitted to the table's seed-to-seed spread); the mean is also what a pick is judged by.

scikit-learn is imported when a surrogate is fitted (once per process and table).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from dmlsearch.search.replay.table import Curve
from dmlsearch.search.replay.table import CurveTable
from dmlsearch.trainables.errors import UserError

__all__ = ["Surrogate", "held_out_fit", "surrogate_for"]

TREES = 100
MIN_LEAF = 2
FOLDS = 5


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class _Scale:
    """One numeric input: its range in its own scale."""

    key: str
    low: float
    high: float
    log: bool

    def __call__(self, value: float) -> float:
        value = math.log(value) if self.log else float(value)
        if self.high <= self.low:
            return 0.0
        return min(1.0, max(0.0, (value - self.low) / (self.high - self.low)))


class _Branch:
    """The curves with one set of settings (one branch of the space) and their model."""

    def __init__(self, keys: tuple[str, ...], curves: Sequence[Curve], metric: str,
                 epochs: int, logs: set[str]) -> None:
        self.keys = keys
        self.numeric = [k for k in keys if all(_is_number(c.config[k]) for c in curves)]
        self.fixed = {k: sorted({str(c.config[k]) for c in curves}) for k in keys
                      if k not in self.numeric}
        self.scales = []
        for key in self.numeric:
            values = [float(c.config[key]) for c in curves]
            log = key in logs and min(values) > 0
            low, high = ((math.log(min(values)), math.log(max(values))) if log
                         else (min(values), max(values)))
            self.scales.append(_Scale(key, low, high, log))
        self.metric, self.epochs = metric, epochs
        self.curves = list(curves)
        self.model: Any = None

    def features(self, config: Mapping[str, Any]) -> list[float]:
        return [scale(float(config[scale.key])) for scale in self.scales]

    def targets(self, curve: Curve) -> list[float]:
        """Per epoch: validation metric, test of the selected model, CPU seconds, loss."""
        rows = [curve.epochs[min(e, len(curve.epochs) - 1)] for e in range(self.epochs)]
        val = [float(r["val"][self.metric]) for r in rows]
        test = [float((curve.test_at(e + 1, self.metric, "max") or {}).get(self.metric, math.nan))
                for e in range(self.epochs)]
        cpu = [float(r.get("cpu_seconds") or r["seconds"]) for r in rows]
        loss = [float(r["train_loss"]) for r in rows]
        return val + test + cpu + loss

    def matches(self, config: Mapping[str, Any]) -> bool:
        return all(k in config for k in self.keys) and all(
            str(config[k]) in allowed for k, allowed in self.fixed.items())

    def data(self) -> tuple[Any, Any]:
        """The recorded curves as arrays: inputs (one row per curve) and targets."""
        import numpy as np

        return (np.array([self.features(c.config) for c in self.curves]),
                np.array([self.targets(c) for c in self.curves], dtype=float))

    def fit(self) -> _Branch:
        self.model = _model("trees", self.epochs).fit(*self.data())
        return self

    def predict(self, rows: Sequence[Mapping[str, Any]]) -> list[list[float]]:
        return self.model.predict([self.features(r) for r in rows]).tolist()


class _Trees:
    """Extremely randomised trees for a branch's curves: one multi-output model for the scores
    (each epoch's validation score and the selected model's test score), another for the costs
    (each epoch's CPU seconds and training loss, standardised). Apart, so that the costs' scale
    does not choose the splits: a loss's values can spread hundreds of times wider than the
    scores (ProxyAnchor's), and one model of all targets then splits on what sets the loss, not
    what sets the score (held-out R² of the glyphs table's ProxyAnchor branch: 0.33 with one
    model, 0.78 apart)."""

    def __init__(self, epochs: int) -> None:
        self.scores = 2 * epochs  # the first columns of a branch's targets

    @staticmethod
    def _trees() -> Any:
        from sklearn.ensemble import ExtraTreesRegressor

        return ExtraTreesRegressor(n_estimators=TREES, min_samples_leaf=MIN_LEAF,
                                   random_state=0, n_jobs=1)

    def fit(self, x: Any, y: Any) -> _Trees:
        """``y``: a float array, one row of targets per curve (``_Branch.data``)."""
        costs = y[:, self.scores:]
        self.mean, self.scale = costs.mean(axis=0), costs.std(axis=0)
        self.scale[self.scale == 0] = 1.0
        self.score_model = self._trees().fit(x, y[:, :self.scores])
        self.cost_model = self._trees().fit(x, (costs - self.mean) / self.scale)
        return self

    def predict(self, x: Any) -> Any:
        import numpy as np

        costs = self.cost_model.predict(x).reshape(len(x), -1) * self.scale + self.mean
        return np.hstack([self.score_model.predict(x).reshape(len(x), -1), costs])


def _model(name: str, epochs: int) -> Any:
    """An unfitted model of one lookup: ``trees`` (the surrogate's), and the baselines
    :func:`held_out_fit` reports: ``knn5`` (a distance-weighted mean of the 5 nearest recorded
    curves) and ``nearest`` (the nearest one)."""
    from sklearn.neighbors import KNeighborsRegressor

    if name == "trees":
        return _Trees(epochs)
    if name == "knn5":
        return KNeighborsRegressor(5, weights="distance")
    if name == "nearest":
        return KNeighborsRegressor(1)
    raise ValueError(f"unknown lookup {name!r}")


def _best(y: Any, epochs: int) -> tuple[Any, Any]:
    """Per curve (rows of targets): the best validation score and the test score of the model
    it selects."""
    import numpy as np

    best = y[:, :epochs].argmax(axis=1)
    return y[:, :epochs].max(axis=1), y[np.arange(len(y)), epochs + best]


def _held_out(name: str, x: Any, y: Any, epochs: int,
              folds: int = FOLDS) -> dict[str, float | None]:
    """K-fold (seeded) predictions of one lookup against the recorded curves: R² and
    Spearman's ρ of the best validation score, mean absolute errors of it and of the test score
    of the model it selects."""
    import numpy as np
    from scipy.stats import spearmanr
    from sklearn.model_selection import KFold

    true_val, true_test = _best(y, epochs)
    val, test = np.zeros(len(y)), np.zeros(len(y))
    for train, held in KFold(min(folds, len(y)), shuffle=True, random_state=0).split(x):
        model = _model(name, epochs).fit(x[train], y[train])
        val[held], test[held] = _best(model.predict(x[held]), epochs)
    spread = float(((true_val - true_val.mean()) ** 2).sum())
    return {
        "r2_val": 1 - float(((val - true_val) ** 2).sum()) / spread if spread else None,
        "spearman_val": float(spearmanr(val, true_val)[0]),
        "mae_val": float(np.abs(val - true_val).mean()),
        "mae_test": float(np.nanmean(np.abs(test - true_test))),
    }


def log_scaled(table: CurveTable) -> set[str]:
    """The settings the recorded space (the header's copy of its file) searches on a log
    scale."""
    import yaml

    try:
        source = yaml.safe_load(table.header.get("space") or "") or {}
    except yaml.YAMLError:
        return set()
    params = source.get("params") if isinstance(source, dict) else None
    items = (list(params.items()) if isinstance(params, dict)
             else [next(iter(p.items())) for p in params or [] if isinstance(p, dict) and p])
    return {str(key) for key, spec in items if isinstance(spec, dict) and spec.get("log")}


class Surrogate:
    """Predicted curves for a sampled table (module docstring)."""

    def __init__(self, table: CurveTable) -> None:
        self.table = table
        metric = table.metric
        usable = [c for c in table.curves.values()
                  if c.seed == 0 and c.status == "ok" and c.epochs
                  and all(metric in r["val"] for r in c.epochs)]
        groups: dict[tuple[Any, ...], list[Curve]] = {}
        for curve in usable:  # a branch: its settings, and the value of each non-numeric one
            keys = tuple(sorted(curve.config))
            choices = tuple((k, str(curve.config[k])) for k in keys
                            if not _is_number(curve.config[k]))
            groups.setdefault((keys, choices), []).append(curve)
        if not groups:
            raise UserError(f"the replay table {table.path.name} holds no training that ran to "
                            "its end; let `dmlsearch record-curves` record more")
        logs = log_scaled(table)
        self.branches = [_Branch(keys, curves, metric, table.epochs, logs).fit()
                         for (keys, _), curves in sorted(groups.items())]

    def branch(self, config: Mapping[str, Any]) -> _Branch:
        found = [b for b in self.branches if b.matches(config)]
        if not found:
            raise UserError(
                f"the replay table {self.table.path.name} has no branch for {dict(config)} (its "
                f"branches vary {[list(b.keys) for b in self.branches]} with "
                f"{[b.fixed for b in self.branches]}); replay a space the table covers")
        return max(found, key=lambda b: len(b.keys))

    def predict(self, configs: Sequence[Mapping[str, Any]]) -> list[list[float]]:
        """The raw targets (see ``_Branch.targets``) of each configuration."""
        out: list[list[float]] = [[] for _ in configs]
        by_branch: dict[int, list[int]] = {}
        for i, config in enumerate(configs):
            by_branch.setdefault(id(self.branch(config)), []).append(i)
        for branch in self.branches:
            index = by_branch.get(id(branch), [])
            if index:
                for i, row in zip(index, branch.predict([configs[i] for i in index])):
                    out[i] = row
        return out

    def curve(self, config: Mapping[str, Any]) -> Curve:
        """The predicted curve of ``config`` (its branch's settings; the rest is ignored)."""
        return self.curves([config])[0]

    def curves(self, configs: Sequence[Mapping[str, Any]]) -> list[Curve]:
        result = []
        epochs, metric = self.table.epochs, self.table.metric
        for config, row in zip(configs, self.predict(configs)):
            branch = self.branch(config)
            val, test = row[:epochs], row[epochs:2 * epochs]
            cpu, loss = row[2 * epochs:3 * epochs], row[3 * epochs:]
            rows = [{"epoch": e + 1, "train_loss": loss[e], "val": {metric: val[e]},
                     "seconds": cpu[e], "cpu_seconds": cpu[e], "test": {metric: test[e]}}
                    for e in range(epochs)]
            best = max(range(epochs), key=lambda e: (val[e], -e))
            result.append(Curve(config={k: config[k] for k in branch.keys}, seed=0,
                                status="ok", reason=None, epochs=rows, best_epoch=best + 1,
                                test_at_best={metric: test[best]}))
        return result


_SURROGATES: dict[int, tuple[CurveTable, Surrogate]] = {}


def surrogate_for(table: CurveTable) -> Surrogate:
    """The surrogate of ``table``, fitted once per process (tables are cached by file and
    modification time, so a table that grew gets a new one; the table is kept with it, so its
    id is not reused)."""
    key = id(table)
    if key not in _SURROGATES:
        _SURROGATES[key] = (table, Surrogate(table))
    return _SURROGATES[key][1]


def held_out_fit(table: CurveTable, *, folds: int = FOLDS) -> dict[str, Any]:
    """How well held-out curves are predicted, per branch and lookup: the surrogate's trees, a
    distance-weighted mean of the 5 nearest recorded curves and the nearest one (in the
    surrogate's scaled inputs); K-fold over the seed-0 curves. For each: R² and Spearman's ρ of
    the best validation score, and the mean absolute error of it and of the test score of the
    selected model, against the noise between two trainings of one configuration (the table's
    seed-1 repeats: the mean absolute difference of their best validation and test scores)."""
    import numpy as np

    surrogate = surrogate_for(table)
    report: dict[str, Any] = {"branches": []}
    for branch in surrogate.branches:
        x, y = branch.data()
        entry: dict[str, Any] = {"keys": list(branch.keys), "fixed": branch.fixed,
                                 "curves": len(branch.curves)}
        for name in ("trees", "knn5", "nearest"):
            entry[name] = _held_out(name, x, y, table.epochs, folds)
        report["branches"].append(entry)
    metric = table.metric
    repeats = [(c, table.curves[(k, 1)]) for (k, s), c in table.curves.items()
               if s == 0 and (k, 1) in table.curves and c.status == "ok"
               and table.curves[(k, 1)].status == "ok"]

    def best(curve: Curve) -> tuple[float, float]:
        row = max(curve.epochs, key=lambda r: r["val"][metric])
        return row["val"][metric], (curve.test_at_best or {}).get(metric, math.nan)

    diffs = [(abs(best(a)[0] - best(b)[0]), abs(best(a)[1] - best(b)[1])) for a, b in repeats]
    report["seed_noise"] = {
        "pairs": len(diffs),
        "mae_val": float(np.mean([d[0] for d in diffs])) if diffs else None,
        "mae_test": float(np.nanmean([d[1] for d in diffs])) if diffs else None,
    }
    report["failed"] = sum(c.status != "ok" for c in table.curves.values())
    return report
