"""How Optuna proposes configurations (``--sampler``): a registry of sampler factories.

Every factory gets the search's :class:`~dmlsearch.search.tune.settings.TuneSettings` and
returns a seeded Optuna sampler. A grid study's points are enqueued as the searcher's
``points_to_evaluate``, so its sampler only fills what the grid leaves open: random.
Optuna is imported when a sampler is built, not when the names are checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from dmlsearch.search.tune.settings import TuneSettings
from dmlsearch.trainables.registry import Registry

__all__ = ["SAMPLERS", "SamplerInfo", "startup_trials"]


@dataclasses.dataclass(frozen=True)
class SamplerInfo:
    description: str
    make: Callable[[TuneSettings], Any]
    single_objective: bool = False  # cannot take --pareto
    multi_objective_only: bool = False  # needs --pareto


SAMPLERS: Registry[SamplerInfo] = Registry("sampler", option="--sampler",
                                           fix="see `dmlsearch run --help`")


def startup_trials(trials: int) -> int:
    """TPE's random start-up for a search of ``trials`` trials: a quarter of the budget, at
    least 3 and at most Optuna's 10, so a default 10-trial search uses the model for its last
    7 (Optuna's 10 would leave it random search); chosen with benchmarks/search_efficiency.py
    (docs/benchmarks.md)."""
    return max(3, min(10, trials // 4))


def _tpe(settings: TuneSettings) -> Any:
    """Multivariate TPE with the conditional parameters in groups (each branch of the space
    modelled jointly), the constant liar (trials running at once are not proposed twice), and a
    start-up sized to the budget (:func:`startup_trials`)."""
    import optuna

    options = {"multivariate": True, "group": True, "constant_liar": True,
               "n_startup_trials": startup_trials(settings.num_samples),
               **dict(settings.sampler_options)}
    return optuna.samplers.TPESampler(seed=settings.seed, **options)


def _random(settings: TuneSettings) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=settings.seed)


def _cmaes(settings: TuneSettings) -> Any:
    import optuna

    return optuna.samplers.CmaEsSampler(seed=settings.seed, warn_independent_sampling=False,
                                        **dict(settings.sampler_options))


def _gp(settings: TuneSettings) -> Any:
    import optuna

    return optuna.samplers.GPSampler(seed=settings.seed, warn_independent_sampling=False,
                                     **dict(settings.sampler_options))


def _nsga2(settings: TuneSettings) -> Any:
    import optuna

    return optuna.samplers.NSGAIISampler(seed=settings.seed)


SAMPLERS.add("tpe", SamplerInfo("Optuna TPE (default; multi-objective too)", _tpe))
SAMPLERS.add("random", SamplerInfo("uniform random search", _random))
SAMPLERS.add("grid", SamplerInfo(
    "every point of the space (categorical or stepped params); --trials caps it", _random))
SAMPLERS.add("cmaes", SamplerInfo(
    "CMA-ES over the numeric params (categoricals sampled at random)", _cmaes,
    single_objective=True))
SAMPLERS.add("gp", SamplerInfo("Gaussian-process Bayesian optimisation", _gp,
                               single_objective=True))
SAMPLERS.add("nsga2", SamplerInfo("NSGA-II, for multi-objective searches (--pareto)", _nsga2,
                                  multi_objective_only=True))
