"""The functional ANOVA (fANOVA; Hutter et al., ICML 2014) of a random-forest surrogate:
the numerics behind :mod:`.importance`, which says what they mean to a person.

A random forest (scikit-learn, 64 trees; a categorical parameter one-hot, as Optuna's evaluator
encodes it) is fitted to objective ~ parameters, each parameter on the scale it is searched on
(log for a log parameter). Its variance over the search space is split by Monte Carlo
(:func:`decompose`): f_i(v) is the mean prediction over ``BACKGROUND`` configurations spread
evenly over the space (scrambled Sobol) with parameter i set to v, f_ij(v, w) likewise with two
set; the main effect of i is Var_v f_i(v), the interaction of (i, j) is
Var(f_ij − f_i − f_j + f_0) over a grid of (v, w), both as fractions of the total variance.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna

__all__ = ["BACKGROUND", "GRID", "decompose", "encode", "scale_of", "surrogate_anova"]

GRID = 12
BACKGROUND = 256


def scale_of(dist: Any) -> str:
    """``log``, ``linear`` or ``categorical``: the scale a parameter is searched and analysed on."""
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return "categorical"
    return "log" if getattr(dist, "log", False) else "linear"


def encode(dist: Any, value: Any) -> float:
    """A parameter's value as the forest sees it: a choice's index, a log parameter's log."""
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return float(dist.to_internal_repr(value))
    if getattr(dist, "log", False):
        return math.log(float(value))
    return float(value)


def _grid(dist: Any) -> tuple[list[Any], np.ndarray]:
    """The values of a parameter that the analysis sets, each standing for an equal share of
    the parameter's range on its searched scale: (as the user reads them, encoded). A discrete
    parameter of a few values: those values; a continuous one: the midpoints of ``GRID`` equal
    cells (not the ends: a grid with both ends overstates a variance by (n+1)/(n−1))."""
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return list(dist.choices), np.arange(len(dist.choices), dtype=float)
    values = _discrete_values(dist)
    if values is not None:
        return values, np.array([encode(dist, v) for v in values])
    low, high = encode(dist, dist.low), encode(dist, dist.high)
    encoded = low + (np.arange(GRID) + 0.5) * (high - low) / GRID
    shown = np.exp(encoded) if dist.log else encoded
    return [float(v) for v in shown], encoded


def _discrete_values(dist: Any) -> list[Any] | None:
    """Every value of a linear-scale integer or stepped parameter of at most ``GRID`` values."""
    step = getattr(dist, "step", None)
    if dist.log or step is None:
        return None
    count = round((float(dist.high) - float(dist.low)) / float(step)) + 1
    if count > GRID:
        return None
    values = [dist.low + k * step for k in range(count)]
    if isinstance(dist, optuna.distributions.FloatDistribution):
        return [round(float(v), 12) for v in values]
    return [int(v) for v in values]


def _background(dists: list[Any], rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` configurations spread evenly over the space on the searched scales (a scrambled
    Sobol sequence: its columns' means are near exact, so that an interaction does not leak
    into a main effect through an unlucky sample)."""
    from scipy.stats import qmc

    units = qmc.Sobol(len(dists), scramble=True, seed=rng).random(size)
    columns = []
    for dist, u in zip(dists, units.T, strict=True):
        _, encoded = _grid(dist)
        if isinstance(dist, optuna.distributions.CategoricalDistribution) or \
                _discrete_values(dist) is not None:
            columns.append(encoded[np.minimum((u * len(encoded)).astype(int), len(encoded) - 1)])
        else:
            low, high = encode(dist, dist.low), encode(dist, dist.high)
            columns.append(low + u * (high - low))
    return np.stack(columns, axis=1)


def _one_hot(dists: list[Any]) -> Callable[[np.ndarray], np.ndarray]:
    """Configurations (a column per parameter, a categorical one as its choice's index) as the
    forest's features: a categorical parameter one-hot, so that a tree separates any one choice
    with one split (as Optuna's evaluator encodes it)."""
    def expand(rows: np.ndarray) -> np.ndarray:
        parts = []
        for k, dist in enumerate(dists):
            if isinstance(dist, optuna.distributions.CategoricalDistribution):
                parts.append(np.eye(len(dist.choices))[rows[:, k].astype(int)])
            else:
                parts.append(rows[:, k:k + 1])
        return np.concatenate(parts, axis=1)

    return expand


def surrogate_anova(
    trials: Sequence[optuna.trial.FrozenTrial], params: list[str], dists: dict[str, Any],
    values: np.ndarray, seed: int,
) -> tuple[dict[str, float], dict[tuple[str, str], float], dict[str, tuple[list, list]],
           float | None]:
    """Main effects, pair interactions, marginal curves and the forest's out-of-bag R²."""
    if not params:
        return {}, {}, {}, None
    x = np.array([[encode(dists[p], t.params[p]) for p in params] for t in trials])
    expand = _one_hot([dists[p] for p in params])
    from sklearn.ensemble import RandomForestRegressor  # seconds to import: when fitted

    forest = RandomForestRegressor(n_estimators=64, min_samples_leaf=1, random_state=seed,
                                   oob_score=True)
    with warnings.catch_warnings():  # a trial in every bootstrap sample: no OOB prediction
        warnings.simplefilter("ignore", UserWarning)
        forest.fit(expand(x), values)

    def predict(rows: np.ndarray) -> np.ndarray:
        return forest.predict(expand(rows))

    return (*decompose(predict, [dists[p] for p in params], params, seed=seed),
            _oob_r2(forest, values))


def decompose(
    predict: Callable[[np.ndarray], np.ndarray], dists: list[Any], params: list[str], *,
    seed: int = 0,
) -> tuple[dict[str, float], dict[tuple[str, str], float], dict[str, tuple[list, list]]]:
    """The functional ANOVA of ``predict`` (configurations as rows, a column per parameter,
    encoded as :func:`encode` does) over the space ``dists`` spans, by Monte Carlo: main
    effects, pair interactions (fractions of the total variance) and the marginal curves."""
    rng = np.random.default_rng(seed)
    back = _background(dists, rng, BACKGROUND)
    # the total from a larger sample: its error is every fraction's
    total = float(np.var(predict(_background(dists, rng, 16 * BACKGROUND))))
    f0 = float(np.mean(predict(back)))
    grids = [_grid(d) for d in dists]
    singles: dict[int, np.ndarray] = {}
    for i, (_, enc) in enumerate(grids):
        rows = np.repeat(back[None], len(enc), axis=0)
        rows[:, :, i] = enc[:, None]
        singles[i] = predict(rows.reshape(-1, len(params))).reshape(len(enc), -1).mean(1)

    def fraction(part: float) -> float:  # Monte Carlo error can put one a little above 1
        return min(1.0, part / total) if total > 0 else 0.0

    main = {p: fraction(float(np.var(singles[i]))) for i, p in enumerate(params)}
    pairs: dict[tuple[str, str], float] = {}
    for i, j in itertools.combinations(range(len(params)), 2):
        ei, ej = grids[i][1], grids[j][1]
        rows = np.repeat(back[None], len(ei) * len(ej), axis=0)
        gi, gj = np.meshgrid(ei, ej, indexing="ij")
        rows[:, :, i] = gi.reshape(-1)[:, None]
        rows[:, :, j] = gj.reshape(-1)[:, None]
        fij = predict(rows.reshape(-1, len(params))).reshape(len(ei), len(ej), -1).mean(2)
        residual = fij - singles[i][:, None] - singles[j][None, :] + f0
        pairs[(params[i], params[j])] = fraction(float(np.var(residual)))
    marginals = {p: (grids[i][0], [float(v) for v in singles[i]]) for i, p in enumerate(params)}
    return main, pairs, marginals


def _oob_r2(forest: Any, values: np.ndarray) -> float | None:  # a fitted RandomForestRegressor
    """R² of each trial's prediction by the trees not fitted to it (None: constant values)."""
    predicted = np.asarray(forest.oob_prediction_, dtype=float).reshape(-1)
    spread = float(np.sum((values - values.mean()) ** 2))
    if spread == 0:
        return None
    return 1 - float(np.sum((values - predicted) ** 2)) / spread


def _plain(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value
