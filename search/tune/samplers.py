"""How Optuna proposes configurations (``--sampler``): a registry of sampler factories, each
registered where it is defined (:func:`register_sampler`, as losses register themselves).

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

__all__ = ["DEFAULT_SAMPLER", "SAMPLERS", "TRANSFER_SAMPLER", "SamplerInfo", "register_sampler",
           "startup_trials"]

# The default search's sampler (with ASHA), chosen with benchmarks/default_choice.py by the rule in
# docs/benchmarks.md ("How the default was chosen"), applied to three development tables over 30
# seeds on the noisy virtual clock, one more table held out ("The default chosen by
# leave-one-table-out"): TPE + ASHA had the best average rank at 25% of the budget (4.31;
# prior-tpe + ASHA 4.83, within the critical difference 1.27). A space's warm starts are still
# tried first; a multi-objective search (--pareto) uses tpe too.
DEFAULT_SAMPLER = "tpe"
# The sampler of a search given --prior-from and no --sampler: the transferred points become the
# prior it draws around, whose weight decays as evidence comes in (search/transfer.py); the
# transfer benchmark (docs/benchmarks.md, "Transfer") measured this sampler with ASHA.
TRANSFER_SAMPLER = "prior-tpe"


@dataclasses.dataclass(frozen=True)
class SamplerInfo:
    description: str
    make: Callable[[TuneSettings], Any]
    single_objective: bool = False  # cannot take --pareto
    multi_objective_only: bool = False  # needs --pareto


SAMPLERS: Registry[SamplerInfo] = Registry("sampler", option="--sampler",
                                           fix="see `dmlsearch run --help`")


def register_sampler(name: str, description: str, *, single_objective: bool = False,
                     multi_objective_only: bool = False) -> Callable:
    """Decorator: the factory below is ``--sampler name``."""
    return SAMPLERS.register(name, lambda make: SamplerInfo(
        description, make, single_objective=single_objective,
        multi_objective_only=multi_objective_only))


def startup_trials(trials: int) -> int:
    """TPE's random start-up for a search of ``trials`` trials: a quarter of the budget, at
    least 3 and at most Optuna's 10, so a default 10-trial search uses the model for its last
    7 (Optuna's 10 would leave it random search); chosen with benchmarks/search_efficiency.py
    (docs/benchmarks.md)."""
    return max(3, min(10, trials // 4))


@register_sampler("tpe", "Optuna TPE (multi-objective too)")
def _tpe(settings: TuneSettings) -> Any:
    """Multivariate TPE with the conditional parameters in groups (each branch of the space
    modelled jointly), the constant liar (trials running at once are not proposed twice), and a
    start-up sized to the budget (:func:`startup_trials`)."""
    import optuna

    options = {"multivariate": True, "group": True, "constant_liar": True,
               "n_startup_trials": startup_trials(settings.num_samples),
               **{k: v for k, v in settings.sampler_options if k not in _PRIOR_OPTIONS}}
    return optuna.samplers.TPESampler(seed=settings.seed, **options)


_PRIOR_OPTIONS = ("uniform", "strength")  # prior-tpe's own options; the rest go to its TPE


def _rungs(settings: TuneSettings) -> Any:
    from dmlsearch.search.tune.prior import Rungs

    return Rungs(settings.max_iterations, settings.grace_period, settings.reduction_factor)


@register_sampler("prior-tpe", "TPE guided by the space's warm starts as a prior that decays "
                  "as evidence comes in", single_objective=True)
def _prior_tpe(settings: TuneSettings) -> Any:
    """:class:`~dmlsearch.search.tune.prior.PriorTPESampler` over this search's TPE
    (:func:`_tpe`) and rungs."""
    from dmlsearch.search.tune.prior import PriorTPESampler

    own = {k: v for k, v in settings.sampler_options if k in _PRIOR_OPTIONS}
    return PriorTPESampler(tpe=_tpe(settings), rungs=_rungs(settings), seed=settings.seed,
                           maximize=settings.mode == "max", **own)


@register_sampler("priorband", "PriorBand's policy: uniform, around the warm starts, or "
                  "mutations of the best trial", single_objective=True)
def _priorband(settings: TuneSettings) -> Any:
    """:class:`~dmlsearch.search.tune.prior.PriorBandSampler` (Mallik et al. 2023) for this
    search's rungs."""
    from dmlsearch.search.tune.prior import PriorBandSampler

    return PriorBandSampler(rungs=_rungs(settings), seed=settings.seed,
                            maximize=settings.mode == "max")


@register_sampler("priorband-tpe", "PriorBand's policy with its uniform share drawn by TPE "
                  "once TPE has its start-up trials (PriorBand+BO's variant)",
                  single_objective=True)
def _priorband_tpe(settings: TuneSettings) -> Any:
    """:class:`~dmlsearch.search.tune.prior.PriorBandSampler` with this search's TPE
    (:func:`_tpe`) as its model."""
    from dmlsearch.search.tune.prior import PriorBandSampler

    return PriorBandSampler(rungs=_rungs(settings), seed=settings.seed,
                            maximize=settings.mode == "max", model=_tpe(settings))


@register_sampler("random", "uniform random search")
@register_sampler("grid", "every point of the space (categorical or stepped params); --trials "
                  "caps it")
def _random(settings: TuneSettings) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=settings.seed)


@register_sampler("cmaes", "CMA-ES over the numeric params (categoricals sampled at random)",
                  single_objective=True)
def _cmaes(settings: TuneSettings) -> Any:
    import optuna

    return optuna.samplers.CmaEsSampler(seed=settings.seed, warn_independent_sampling=False,
                                        **dict(settings.sampler_options))


@register_sampler("gp", "Gaussian-process Bayesian optimisation", single_objective=True)
def _gp(settings: TuneSettings) -> Any:
    import optuna

    return optuna.samplers.GPSampler(seed=settings.seed, warn_independent_sampling=False,
                                     **dict(settings.sampler_options))


@register_sampler("nsga2", "NSGA-II, for multi-objective searches (--pareto)",
                  multi_objective_only=True)
def _nsga2(settings: TuneSettings) -> Any:
    import optuna

    return optuna.samplers.NSGAIISampler(seed=settings.seed)
