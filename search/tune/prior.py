"""Samplers that use what users know: the space's warm starts (published defaults and optima)
as a *prior*, not only as the first trials.

The prior is a mixture with one component per warm start (the points the searcher enqueues:
the proposal study's trials with ``fixed_params``): around each, every numeric parameter is a
normal distribution truncated to its range, in the range scaled to [0, 1] (log-scaled for a
``log`` range), of standard deviation :data:`SIGMA`; a categorical one takes the warm start's
choice :data:`CHOICE_WEIGHT` times as often as each other choice. These are NePS's "medium"
confidence values (PriorBand, Mallik et al., NeurIPS 2023). A parameter a warm start does not
set (another branch of a conditional space) is drawn around a warm start that sets it in the
same branch, else uniformly.

These samplers draw each trial from one of a few *sources*, chosen when the trial starts:

- :class:`PriorBandSampler`, **PriorBand's sampling policy** (written from the paper and its
  reference implementation, automl/neps ``priorband.py``), for an ASHA scheduler: new trials
  enter at the lowest rung, so a trial is uniform with probability 1 / (1 + η⁰) = 1/2, else
  from the prior; once a trial trained to its end, one SH bracket's worth of epochs was spent
  and some rung holds η results, that second half is split between the prior and
  *incumbent mutation* by how likely the best 1/η of the highest such rung are under each
  (a linearly rank-weighted sum of densities); a mutation re-draws each parameter of the
  best completed trial with probability 1/2, a numeric one around its value (σ 0.25), a
  categorical one among the other choices.
- the same with a model (``--sampler priorband-tpe``), PriorBand+BO's variant from the paper:
  its uniform half drawn by TPE once TPE has its start-up trials (the paper used a GP);
- :class:`PriorTPESampler`, **TPE guided by the prior** (dmlsearch's own, from πBO's decaying
  prior, Hvarfner et al., ICLR 2022, and PriorBand's evidence split): a trial is uniform with
  probability :data:`UNIFORM`; otherwise from the prior with a weight that decays as evidence
  comes in, β / (β + n), n the full trainings' worth of epochs the finished trials trained
  (β = :data:`PRIOR_STRENGTH`), times PriorBand's prior share once it can be computed (a prior
  that the best trials do not resemble loses its weight faster), else from multivariate TPE,
  which has learnt from every trial so far; while TPE has fewer finished trials than its
  start-up count, its start-up follows PriorBand's first policy instead of TPE's uniform one:
  half uniform (the space covered for TPE's model), half from the prior
  (:data:`STARTUP_UNIFORM`).

All read the search's rungs (``max_t``, the first rung, η) to know what was trained how far.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.distributions import CategoricalDistribution
from optuna.distributions import FloatDistribution
from optuna.distributions import IntDistribution
from optuna.samplers import BaseSampler
from optuna.samplers import RandomSampler
from optuna.samplers import TPESampler
from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

__all__ = ["CHOICE_WEIGHT", "PRIOR_STRENGTH", "SIGMA", "UNIFORM", "Prior", "PriorBandSampler",
           "PriorTPESampler", "Rungs"]

SIGMA = 0.25  # NePS "medium" confidence: the normal's σ in the range scaled to [0, 1]
CHOICE_WEIGHT = 4.0  # NePS "medium" confidence: the warm start's choice vs each other choice
MUTATION_RATE = 0.5  # PriorBand: each parameter of the incumbent re-drawn with this probability
UNIFORM = 0.1  # PriorTPE: the share of uniform draws (robust to a misleading prior)
PRIOR_STRENGTH = 10.0  # PriorTPE: β of the prior's weight β / (β + n)
STARTUP_UNIFORM = 0.5  # PriorTPE's start-up: half uniform (PriorBand's at rung 0), half prior
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
_MODE = "dmlsearch_source"  # a trial's system attribute: which source drew it


# ---- one parameter in [0, 1] -----------------------------------------------------------------
def to_unit(dist: BaseDistribution, value: Any) -> float:
    """A numeric value's place in its range scaled to [0, 1] (log-scaled for a log range)."""
    assert isinstance(dist, (FloatDistribution, IntDistribution))
    low, high, x = float(dist.low), float(dist.high), float(value)
    if dist.log:
        low, high, x = math.log(low), math.log(high), math.log(max(x, float(dist.low)))
    return 0.0 if high <= low else min(1.0, max(0.0, (x - low) / (high - low)))


def from_unit(dist: BaseDistribution, u: float) -> Any:
    """The value at ``u`` in [0, 1] of a numeric range, on its step (an int for an int)."""
    assert isinstance(dist, (FloatDistribution, IntDistribution))
    low, high = float(dist.low), float(dist.high)
    u = min(1.0, max(0.0, u))
    x = (math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if dist.log
         else low + u * (high - low))
    step = dist.step
    if step is not None:
        x = low + round((x - low) / step) * step
        x = min(max(x, low), low + math.floor((high - low) / step + 1e-9) * step)
    if isinstance(dist, IntDistribution):
        return int(round(x))
    return float(x)


def _normal_pdf_truncated(u: float, centre: float, sigma: float) -> float:
    """The density at ``u`` of N(centre, σ²) truncated to [0, 1]."""
    from scipy.stats import truncnorm

    a, b = (0.0 - centre) / sigma, (1.0 - centre) / sigma
    return float(truncnorm.pdf(u, a, b, loc=centre, scale=sigma))


def _draw_truncated(rng: np.random.RandomState, centre: float, sigma: float) -> float:
    """A draw of N(centre, σ²) truncated to [0, 1] (by rejection: σ ≤ 0.5 accepts often)."""
    for _ in range(1000):
        u = rng.normal(centre, sigma)
        if 0.0 <= u <= 1.0:
            return float(u)
    return float(min(1.0, max(0.0, centre)))


def draw_around(rng: np.random.RandomState, dist: BaseDistribution, centre: Any, *,
                sigma: float = SIGMA, choice_weight: float = CHOICE_WEIGHT) -> Any:
    """One value of ``dist`` drawn around ``centre`` (module docstring). ``choice_weight`` 0:
    a categorical never keeps the centre's choice (a mutation)."""
    if isinstance(dist, CategoricalDistribution):
        choices = list(dist.choices)
        weights = np.array([choice_weight if c == centre else 1.0 for c in choices])
        if weights.sum() <= 0:
            weights = np.ones(len(choices))
        return choices[int(rng.choice(len(choices), p=weights / weights.sum()))]
    return from_unit(dist, _draw_truncated(rng, to_unit(dist, centre), sigma))


def density_around(dist: BaseDistribution, value: Any, centre: Any, *, sigma: float = SIGMA,
                   choice_weight: float = CHOICE_WEIGHT) -> float:
    """The density of ``value`` under :func:`draw_around` (in [0, 1] units for a number;
    before the step's rounding)."""
    if isinstance(dist, CategoricalDistribution):
        choices = list(dist.choices)
        weights = [choice_weight if c == centre else 1.0 for c in choices]
        return weights[choices.index(value)] / sum(weights) if value in choices else 0.0
    return _normal_pdf_truncated(to_unit(dist, value), to_unit(dist, centre), sigma)


def _uniform_density(dist: BaseDistribution) -> float:
    if isinstance(dist, CategoricalDistribution):
        return 1.0 / len(dist.choices)
    return 1.0


class Prior:
    """The mixture around ``points`` (parameter name → value; module docstring)."""

    def __init__(self, points: Sequence[Mapping[str, Any]], *, sigma: float = SIGMA,
                 choice_weight: float = CHOICE_WEIGHT) -> None:
        self.points = [dict(p) for p in points]
        self.sigma, self.choice_weight = sigma, choice_weight

    def centre_for(self, name: str, sampled: Mapping[str, Any], first: Mapping[str, Any] | None
                   ) -> Mapping[str, Any] | None:
        """The point a trial's parameter ``name`` is drawn around: the trial's own centre when
        it sets ``name``, else the first point that sets it and agrees with what the trial has
        drawn so far (its branch), else any that sets it; None: no point does."""
        if first is not None and name in first:
            return first
        setting = [p for p in self.points if name in p]
        agreeing = [p for p in setting if all(p.get(k, v) == v for k, v in sampled.items()
                                              if not isinstance(v, float))]
        return (agreeing or setting or [None])[0]

    def log_density(self, params: Mapping[str, Any],
                    distributions: Mapping[str, BaseDistribution]) -> float:
        """log of the mixture's density at ``params`` (equal weights; a parameter a point does
        not set counts as uniform for it)."""
        if not self.points:
            return 0.0
        terms = []
        for point in self.points:
            log = 0.0
            for name, value in params.items():
                dist = distributions[name]
                if name in point:
                    d = density_around(dist, value, point[name], sigma=self.sigma,
                                       choice_weight=self.choice_weight)
                else:
                    d = _uniform_density(dist)
                log += math.log(max(d, 1e-300))
            terms.append(log)
        top = max(terms)
        return top + math.log(sum(math.exp(t - top) for t in terms) / len(terms))


# ---- what the search trained how far ------------------------------------------------------------
class Rungs:
    """ASHA's rungs for trials of ``max_t`` epochs: ``first`` · ηᵏ below ``max_t``, and
    ``max_t``."""

    def __init__(self, max_t: int, first: int, eta: int) -> None:
        self.max_t, self.eta = max_t, eta
        milestones, m = [], max(1, first)
        while m < max_t:
            milestones.append(m)
            m *= eta
        self.milestones = [*milestones, max_t]

    def bracket_cost(self) -> float:
        """One SH bracket's epochs: η^(K−k) trials reach rung k of K rungs (each new rung
        costs the epochs between it and the one before)."""
        k = len(self.milestones) - 1
        cost, before = 0.0, 0
        for i, m in enumerate(self.milestones):
            cost += self.eta ** (k - i) * (m - before)
            before = m
        return cost

    def at(self, trials: Sequence[FrozenTrial], milestone: int) -> list[tuple[FrozenTrial, float]]:
        """The trials that reached ``milestone`` and their score there."""
        out = []
        for t in trials:
            steps = [s for s in t.intermediate_values if s <= milestone]
            if t.intermediate_values and max(t.intermediate_values) >= milestone and steps:
                out.append((t, float(t.intermediate_values[max(steps)])))
        return out


def _finished(study: Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=_FINISHED)]


def _incumbent(study: Study, trials: Sequence[FrozenTrial], maximize: bool) -> FrozenTrial | None:
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    if not complete:
        return None
    return (max if maximize else min)(complete, key=lambda t: float(t.value))


def _warm_starts(study: Study) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    for t in study.get_trials(deepcopy=False):
        fixed = t.system_attrs.get("fixed_params")
        if fixed and dict(fixed) not in points:
            points.append(dict(fixed))
    return points


def prior_share(study: Study, trials: Sequence[FrozenTrial], rungs: Rungs, prior: Prior,
                incumbent: FrozenTrial, maximize: bool) -> float | None:
    """PriorBand's split of the non-uniform weight: the prior's share, from how likely the
    best 1/η of the highest rung holding η results are under the prior and under the
    distribution around the incumbent (rank-weighted); None before PriorBand would split
    (no completed trial, less than one SH bracket spent, no rung with η results)."""
    if incumbent is None:
        return None
    spent = sum(max(t.intermediate_values, default=0) for t in trials)
    if spent < rungs.bracket_cost():
        return None
    full = [m for m in rungs.milestones if len(rungs.at(trials, m)) >= rungs.eta]
    if not full:
        return None
    at_rung = sorted(rungs.at(trials, max(full)), key=lambda p: p[1], reverse=maximize)
    top = [t for t, _ in at_rung[:max(1, len(at_rung) // rungs.eta)]]
    around_inc = Prior([incumbent.params], sigma=prior.sigma, choice_weight=prior.choice_weight)
    weights = np.arange(len(top), 0, -1, dtype=float)
    score_prior = score_inc = 0.0
    for weight, t in zip(weights, top):
        score_prior += weight * math.exp(prior.log_density(t.params, t.distributions))
        score_inc += weight * math.exp(around_inc.log_density(t.params, t.distributions))
    total = score_prior + score_inc
    return 0.5 if total <= 0 else score_prior / total


# ---- the samplers --------------------------------------------------------------------------------
class _SourceSampler(BaseSampler):
    """Draws each trial from one source (``prior``, ``incumbent``, ``uniform`` or ``model``),
    chosen in :meth:`choose` when the trial starts and kept as its system attribute
    ``dmlsearch_source``. ``model``: the sampler that draws the ``model`` trials (TPE; it learns
    from every finished trial, whichever source drew it), once it has finished its start-up
    count of trials; None: there are no ``model`` trials."""

    def __init__(self, *, rungs: Rungs, seed: int | None, maximize: bool = True,
                 model: TPESampler | None = None) -> None:
        self._rng = np.random.RandomState(seed)
        self._random = RandomSampler(seed=seed)
        self.rungs, self.maximize = rungs, maximize
        self._model = model
        self._startup = int(getattr(model, "_n_startup_trials", 0))  # TPE's start-up count
        self._sources: dict[int, str] = {}
        self._centres: dict[int, dict[str, Any] | None] = {}
        self._prior: Prior | None = None

    def prior(self, study: Study) -> Prior:
        """The prior around the study's warm starts (enqueued before the first trial)."""
        if self._prior is None:
            self._prior = Prior(_warm_starts(study))
        return self._prior

    def model_ready(self, trials: Sequence[FrozenTrial]) -> bool:
        """Whether the model draws by itself yet (else it would draw uniformly)."""
        return self._model is not None and len(trials) >= self._startup

    def choose(self, study: Study, trials: Sequence[FrozenTrial], prior: Prior) -> str:
        raise NotImplementedError

    # Optuna's sampler interface
    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._random.before_trial(study, trial)
        if self._model is not None:
            self._model.before_trial(study, trial)
        if "fixed_params" in trial.system_attrs:
            source = "warm start"
        else:
            prior = self.prior(study)
            source = self.choose(study, _finished(study), prior)
            if source == "prior":
                self._centres[trial.number] = (prior.points[self._rng.randint(len(prior.points))]
                                               if prior.points else None)
            elif source == "incumbent":
                best = _incumbent(study, _finished(study), self.maximize)
                self._centres[trial.number] = None if best is None else dict(best.params)
        self._sources[trial.number] = source
        study._storage.set_trial_system_attr(trial._trial_id, _MODE, source)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        if self._model is not None and self._sources.get(trial.number) == "model":
            return self._model.infer_relative_search_space(study, trial)
        return {}

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if self._model is not None and self._sources.get(trial.number) == "model":
            return self._model.sample_relative(study, trial, search_space)
        return {}

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        source = self._sources.get(trial.number, "uniform")
        if source == "model" and self._model is not None:
            return self._model.sample_independent(study, trial, param_name, param_distribution)
        if source == "incumbent":
            centre = self._centres.get(trial.number)
            if centre is not None and param_name in centre:
                if self._rng.rand() >= MUTATION_RATE:
                    return centre[param_name]
                return draw_around(self._rng, param_distribution, centre[param_name],
                                   choice_weight=0.0)
            source = "prior"  # a branch the incumbent does not have
        if source == "prior":
            centre = self.prior(study).centre_for(param_name, trial.params,
                                                  self._centres.get(trial.number))
            if centre is not None:
                return draw_around(self._rng, param_distribution, centre[param_name])
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        if self._model is not None:
            self._model.after_trial(study, trial, state, values)
        self._random.after_trial(study, trial, state, values)
        self._sources.pop(trial.number, None)
        self._centres.pop(trial.number, None)

    def reseed_rng(self) -> None:
        self._rng.seed()
        self._random.reseed_rng()
        if self._model is not None:
            self._model.reseed_rng()

    def _pick(self, weights: Mapping[str, float]) -> str:
        names = [n for n, w in weights.items() if w > 0]
        p = np.array([weights[n] for n in names], dtype=float)
        return names[int(self._rng.choice(len(names), p=p / p.sum()))]


class PriorBandSampler(_SourceSampler):
    """PriorBand's sampling policy on ASHA (module docstring); with a ``model``, PriorBand+BO's
    variant: its uniform share drawn by the model once the model has its start-up trials."""

    def weights(self, study: Study, trials: Sequence[FrozenTrial], prior: Prior
                ) -> dict[str, float]:
        """The probability of each source for the next trial."""
        w_random = 1.0 / (1.0 + self.rungs.eta ** 0)  # new trials enter at rung 0
        w_prior = 1.0 - w_random
        random = "model" if self.model_ready(trials) else "uniform"
        incumbent = _incumbent(study, trials, self.maximize)
        if not prior.points:
            return {random: w_random, "incumbent": w_prior} if incumbent is not None else {
                random: 1.0}
        share = prior_share(study, trials, self.rungs, prior, incumbent, self.maximize)
        if share is None:
            return {random: w_random, "prior": w_prior}
        return {random: w_random, "prior": w_prior * share, "incumbent": w_prior * (1 - share)}

    def choose(self, study: Study, trials: Sequence[FrozenTrial], prior: Prior) -> str:
        return self._pick(self.weights(study, trials, prior))


class PriorTPESampler(_SourceSampler):
    """TPE guided by the prior (module docstring). ``tpe``: the TPE sampler drawing the
    ``model`` trials."""

    def __init__(self, *, tpe: TPESampler, rungs: Rungs, seed: int | None,
                 maximize: bool = True, uniform: float = UNIFORM,
                 strength: float = PRIOR_STRENGTH) -> None:
        super().__init__(rungs=rungs, seed=seed, maximize=maximize, model=tpe)
        self._uniform, self._strength = uniform, strength

    def weights(self, study: Study, trials: Sequence[FrozenTrial], prior: Prior
                ) -> dict[str, float]:
        """The probability of each source for the next trial."""
        if not prior.points:
            return {"model": 1.0}
        evidence = sum(max(t.intermediate_values, default=0) for t in trials) / self.rungs.max_t
        w_prior = self._strength / (self._strength + evidence)
        incumbent = _incumbent(study, trials, self.maximize)
        share = prior_share(study, trials, self.rungs, prior, incumbent, self.maximize)
        if share is not None:
            w_prior *= share
        rest = 1.0 - self._uniform
        if not self.model_ready(trials):  # TPE's start-up: PriorBand's first policy
            return {"uniform": STARTUP_UNIFORM, "prior": 1.0 - STARTUP_UNIFORM}
        return {"uniform": self._uniform, "prior": rest * w_prior, "model": rest * (1 - w_prior)}

    def choose(self, study: Study, trials: Sequence[FrozenTrial], prior: Prior) -> str:
        return self._pick(self.weights(study, trials, prior))


def sources(study: optuna.Study) -> dict[int, str]:
    """Which source drew each trial of ``study`` (trial number → source)."""
    return {t.number: str(t.system_attrs.get(_MODE, "")) for t in study.get_trials(
        deepcopy=False)}
