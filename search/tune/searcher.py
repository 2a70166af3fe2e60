"""The search's Ray Tune ``Searcher``: Optuna proposes, and the stored study (``optuna.db``)
holds exactly what was trained.

Two Optuna studies, one sampler:

- the **proposal study** (in memory, in the searcher's state): what the sampler learns from and
  asks. It holds every trained trial as the stored study does, plus the proposals that repeated a
  configuration already trained to its end; those end FAIL there, an observation no sampler
  learns from (TPE, GP, CMA-ES and NSGA-II read COMPLETE and PRUNED trials only) and that no
  start-up count includes.
- the **stored study** (``optuna.db``): one trial per Ray trial, nothing else. Every epoch's score
  (the trial's best validation metric so far; k-fold: the mean over fits) is an intermediate
  value at step = epochs trained over all folds and repeats; a trial ends COMPLETE when it
  trained to its end, PRUNED when the scheduler or the hard time limit stopped it (Optuna's
  value: its last score), FAIL with its reason when it failed. Optuna's own tools
  (``optuna-dashboard``, ``optuna.importance``) read it as it is.

Configurations reach Ray in setting keys: the searcher turns Optuna's names
(``loss.margin[proxy_anchor]``) into setting keys (``loss.margin``), the one place this happens.
A proposal that repeats a configuration trained to its end trains nothing (a trial is
deterministic given its configuration, seed included); it is counted (the stored study's
attribute ``dmlsearch_repeats_answered``) and the sampler is asked again; after
:data:`MAX_REPEATS` in a row the space is trained out and the search starts no more trials. A
trial the scheduler stopped, a failed one or one still running is no answer.

The searcher also keeps the search's soft budgets: after ``deadline`` (``--time-budget``),
``max_epochs`` epochs trained or ``max_device_seconds`` of training (a comparison's
``--budget``), it proposes nothing more and the running trials finish.

A module-level class: Ray's experiment state pickles the searcher, and a resumed search gets it
by reference. Imported only when a search runs (importing Ray costs seconds).
"""

from __future__ import annotations

import functools
import logging
import math
import pickle
import time
import warnings
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from optuna.trial import TrialState
from ray.tune.search import Searcher

from dmlsearch.search.study_dir import write_atomic
from dmlsearch.search.tune.budget import Limit
from dmlsearch.search.tune.budget import Usage
from dmlsearch.search.tune.restore import aligned_folder
from dmlsearch.search.tune.restore import last_result
from dmlsearch.search.tune.restore import started
from dmlsearch.search.tune.study import RAY_TRIAL_ID
from dmlsearch.search.tune.study import REASON
from dmlsearch.search.tune.study import REPEATS_ANSWERED
from dmlsearch.search.tune.study import STOPPED_BY
from dmlsearch.search.tune.study import record_number
from dmlsearch.spaces import config_from_sample

__all__ = ["MAX_REPEATS", "StudySearcher", "flush_failures", "end_failed_trial"]

log = logging.getLogger(__name__)
optuna.logging.set_verbosity(optuna.logging.WARNING)  # "A new study created...": noise here

# Proposals in a row that repeat trained configurations before the search is called finished.
MAX_REPEATS = 100
_ITERATION = "training_iteration"

# Failed trials whose Optuna trials wait for their reason: Ray tells the searcher that a trial
# errored before its callbacks (which can read the error) hear of it, and a finished Optuna
# trial takes no more attributes. trial id -> the searcher's function that ends it as FAIL.
_PENDING_FAILURES: dict[str, Callable[[str], None]] = {}


def end_failed_trial(trial_id: str, reason: str) -> None:
    """End the Optuna trials of a failed Ray trial as FAIL, with ``reason`` recorded."""
    fail = _PENDING_FAILURES.pop(trial_id, None)
    if fail is not None:
        fail(reason)


def flush_failures() -> None:
    """End the Optuna trials of failures whose reason never came (see ``_PENDING_FAILURES``)."""
    for trial_id in list(_PENDING_FAILURES):
        end_failed_trial(trial_id, "failed (Ray Tune gave no reason)")


def _key(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(params.items()))


def _same(fixed: dict[str, Any], params: dict[str, Any]) -> bool:
    """Whether enqueued parameters (a warm start) are a trial's parameters."""
    def equal(a: Any, b: Any) -> bool:
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
                not isinstance(a, bool) and not isinstance(b, bool):
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return a == b

    return set(fixed) == set(params) and all(equal(fixed[k], params[k]) for k in params)


class StudySearcher(Searcher):
    """Optuna proposals for Ray Tune, recorded budget-aware in ``optuna.db`` (module docstring).

    ``objectives`` are the result keys Optuna optimises (the score, and a cost with
    ``--pareto``) in ``directions`` ("max"/"min"); ``stopped_by`` names the scheduler, recorded
    on the trials it prunes.
    """

    def __init__(self, *, space: Callable[[optuna.Trial], dict[str, Any]],
                 objectives: Sequence[str], directions: Sequence[str],
                 sampler: optuna.samplers.BaseSampler, storage: str, study_name: str,
                 points: Sequence[dict[str, Any]] = (), stopped_by: str = "the scheduler",
                 deadline: float | None = None, hard_deadline: float | None = None,
                 max_epochs: int | None = None, max_device_seconds: float | None = None,
                 devices_per_trial: float = 1.0, hard_budget: bool = False,
                 max_repeats: int = MAX_REPEATS, experiment: Path | str | None = None,
                 study_attrs: Mapping[str, Any] | None = None,
                 objective_names: Sequence[str] | None = None) -> None:
        super().__init__(metric=objectives[0], mode=directions[0])
        self._space = space
        self._objectives = list(objectives)
        opt_directions = ["minimize" if d == "min" else "maximize" for d in directions]
        self._proposals = optuna.create_study(storage=optuna.storages.InMemoryStorage(),
                                              sampler=sampler, directions=opt_directions)
        for point in points:
            self._proposals.enqueue_trial(point)
        self._storage_url, self._study_name = storage, study_name
        self._directions = opt_directions
        self._study_attrs = dict(study_attrs or {})
        self._objective_names = list(objective_names or objectives)
        self._open_stored()
        self._live: dict[str, tuple[int, int]] = {}  # Ray trial -> (proposal id, stored id)
        self._last: dict[str, dict[str, Any]] = {}  # Ray trial -> its last result (kept keys)
        self._done: set[str] = set()
        self._trained: dict[tuple[tuple[str, Any], ...], int] = {}  # params -> stored number
        self._stopped_by = stopped_by
        self._deadline, self._hard_deadline = deadline, hard_deadline
        self._limit = Limit(epochs=max_epochs, device_seconds=max_device_seconds)
        self.usage = Usage(devices_per_trial)
        self._hard_budget = hard_budget  # running trials are stopped when it is spent
        self._max_repeats = max_repeats
        self._repeats = 0
        self._experiment = experiment  # Ray's experiment folder: which trials Ray started
        self._requeued: list[tuple[int, int]] = []  # (proposal, stored): to propose again

    # ---- the stored study -----------------------------------------------------------------------
    def _open_stored(self) -> None:
        self._stored = optuna.create_study(storage=self._storage_url, study_name=self._study_name,
                                           directions=self._directions, load_if_exists=True)
        self._stored_storage = self._stored._storage
        # optuna-dashboard: the metric, not "Objective 0" (a searcher saved by an older version
        # holds neither name nor attributes)
        if self._stored.metric_names is None:
            with warnings.catch_warnings():  # "experimental" since Optuna 3.2: noise here
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self._stored.set_metric_names(getattr(self, "_objective_names",
                                                      self._objectives))
        for key, value in getattr(self, "_study_attrs", {}).items():
            if self._stored.user_attrs.get(key) != value:
                self._stored.set_user_attr(key, value)
        for trial in self._stored.get_trials(deepcopy=False):  # a resumed search's names
            if RAY_TRIAL_ID in trial.user_attrs:
                record_number(trial.user_attrs[RAY_TRIAL_ID], trial.number)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_stored"], state["_stored_storage"]  # reopened from the URL
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._open_stored()

    def save(self, checkpoint_path: str) -> None:
        write_atomic(Path(checkpoint_path), pickle.dumps(self.__getstate__()))

    def restore(self, checkpoint_path: str) -> None:
        self.__setstate__(pickle.loads(Path(checkpoint_path).read_bytes()))
        self._reconcile()

    def _reconcile(self) -> None:
        """After a restore the stored study is the truth; Ray saved this searcher's state with
        its experiment, up to seconds before the driver stopped (:mod:`.restore`). What the
        study holds since, this searcher learns: a trial it holds as running that the study
        ended ends here too; a study trial it never heard of goes into the proposal study (a
        warm start it ran leaves the queue) and, still running, is Ray's again (Ray started it:
        restored as PENDING) or is proposed again first (Ray never started it); what every trial
        trained counts in the budget."""
        for trial_id, (proposal_id, stored_id) in list(self._live.items()):
            recorded = self._stored_storage.get_trial(stored_id)
            if recorded.state.is_finished():
                self._finish_proposal(proposal_id, recorded.state, recorded.values)
                self._live.pop(trial_id)
                self._done.add(trial_id)
                if recorded.state == TrialState.COMPLETE:
                    self._trained.setdefault(_key(recorded.params), recorded.number)
        known = {*self._live, *self._done}
        experiment = aligned_folder() or getattr(self, "_experiment", None)
        self._requeued = getattr(self, "_requeued", [])  # (a state saved before they were)
        for stored in self._stored.get_trials(deepcopy=False):
            trial_id = stored.user_attrs.get(RAY_TRIAL_ID)
            if trial_id is None:
                continue
            self.usage.add(trial_id, last_result(experiment, trial_id) or {})
            if trial_id in known:
                continue
            proposal_id = self._adopt(stored)
            if stored.state.is_finished():
                self._done.add(trial_id)
                if stored.state == TrialState.COMPLETE:
                    self._trained.setdefault(_key(stored.params), stored.number)
            elif started(experiment, trial_id):
                self._live[trial_id] = (proposal_id, stored._trial_id)
            else:
                self._requeued.append((proposal_id, stored._trial_id))
        self._repeats = max(self._repeats, int(self._stored.user_attrs.get(REPEATS_ANSWERED, 0)))

    def _adopt(self, stored: FrozenTrial) -> int:
        """The proposal study's trial for a stored trial it never saw: the warm start (or grid
        point) waiting with its parameters, else a new one; its scores and end as stored."""
        storage = self._proposals._storage
        waiting = next((t for t in self._proposals.get_trials(
            deepcopy=False, states=(TrialState.WAITING,))
            if _same(t.system_attrs.get("fixed_params") or {}, stored.params)), None)
        if waiting is not None and storage.set_trial_state_values(waiting._trial_id,
                                                                  TrialState.RUNNING):
            proposal_id = waiting._trial_id
            for name, value in stored.params.items():
                distribution = stored.distributions[name]
                storage.set_trial_param(proposal_id, name, distribution.to_internal_repr(value),
                                        distribution)
        else:
            proposal_id = storage.create_new_trial(self._proposals._study_id, FrozenTrial(
                number=-1, state=TrialState.RUNNING, value=None, values=None,
                datetime_start=stored.datetime_start, datetime_complete=None,
                params=stored.params, distributions=stored.distributions, user_attrs={},
                system_attrs={}, intermediate_values={}, trial_id=-1))
        for step, value in stored.intermediate_values.items():
            storage.set_trial_intermediate_value(proposal_id, step, value)
        if stored.state.is_finished():
            self._finish_proposal(proposal_id, stored.state, stored.values)
        return proposal_id

    def _propose_again(self, trial_id: str) -> dict[str, Any]:
        """A proposal Ray never started (the driver stopped first), for Ray trial ``trial_id``:
        the same study trial, now running as this Ray trial, with the same configuration."""
        proposal_id, stored_id = self._requeued.pop(0)
        self._stored_storage.set_trial_user_attr(stored_id, RAY_TRIAL_ID, trial_id)
        record_number(trial_id, self._stored_storage.get_trial_number_from_id(stored_id))
        self._live[trial_id] = (proposal_id, stored_id)
        params = self._proposals._storage.get_trial(proposal_id).params
        return config_from_sample(self._space(optuna.trial.FixedTrial(params)))

    def trial_ids(self) -> set[str]:
        """The Ray trials this searcher proposed that are running or ended."""
        return {*self._live, *self._done}

    # ---- Ray's Searcher interface ---------------------------------------------------------------
    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        return False  # configured at construction; Tune's param_space is empty

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if trial_id in self._live:  # asked again for the same trial (a restore): same answer
            return None
        if self._budget_spent():
            return Searcher.FINISHED
        if self._hard_budget and not self._room():
            return None  # the running trials will spend what is left: ask again later
        if self._requeued:
            return self._propose_again(trial_id)
        for _ in range(self._max_repeats):
            trial = self._proposals.ask()
            config = self._space(trial)
            earlier = self._trained.get(_key(trial.params))
            if earlier is None:
                self._live[trial_id] = (trial._trial_id, self._start_stored(trial, trial_id))
                # The one place Optuna's names (``loss.margin[proxy_anchor]``) become setting
                # keys (``loss.margin``): Ray, the trials, MLflow and the trial records see only
                # these.
                return config_from_sample(config)
            self._answer_repeat(trial, earlier)
        log.warning("the sampler proposed %d configurations in a row that were already trained; "
                    "no new trials are started (the space is trained out, or the sampler has "
                    "settled)", self._max_repeats)
        return Searcher.FINISHED

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        ids = self._live.get(trial_id)
        if ids is None:
            return
        self.usage.add(trial_id, result)
        self._last[trial_id] = {k: result.get(k) for k in (*self._objectives, _ITERATION,
                                                           "trial_finished")}
        value, step = result.get(self._objectives[0]), result.get(_ITERATION)
        if len(self._objectives) > 1 or not isinstance(value, (int, float)) or step is None:
            return  # Optuna takes no intermediate values for several objectives
        if not math.isfinite(value):  # no validation yet (every fit stopped before one)
            return
        for storage, trial in ((self._proposals._storage, ids[0]),
                               (self._stored_storage, ids[1])):
            storage.set_trial_intermediate_value(trial, int(step), float(value))

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        ids = self._live.get(trial_id)
        if ids is None or trial_id in self._done:
            return
        if error:  # the reason comes with the callback that reads the error
            _PENDING_FAILURES[trial_id] = functools.partial(self._fail, trial_id)
            return
        if result and result.get(_ITERATION) is not None:
            # Ray hands a trial's last result (the one that finishes it, or on which the
            # scheduler stops it) to on_trial_complete instead of on_trial_result.
            self.on_trial_result(trial_id, result)
        # A trial stopped while paused (HyperBand) comes without a result: its last one says.
        result = result or self._last.get(trial_id)
        values = [(result or {}).get(o) for o in self._objectives]
        finished = bool((result or {}).get("trial_finished"))
        if finished and all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            state, told = TrialState.COMPLETE, [float(v) for v in values]
        elif finished:  # trained to its end without a score (never evaluated)
            state, told = TrialState.FAIL, None
            self._stored_storage.set_trial_user_attr(ids[1], REASON, "no validation score")
        else:  # stopped early: Optuna's value is its last intermediate value
            state, told = TrialState.PRUNED, None
            if self._hard_deadline is not None and time.time() >= self._hard_deadline:
                who = "the time limit"
            elif self._hard_budget and self._limit.spent(self.usage):
                who = "the budget"  # a comparison stops every trial once a method's is spent
            else:
                who = self._stopped_by
            self._stored_storage.set_trial_user_attr(ids[1], STOPPED_BY, who)
        self._end(trial_id, state, told)

    # ---- helpers --------------------------------------------------------------------------------
    def _budget_spent(self) -> bool:
        if self._deadline is not None and time.time() >= self._deadline:
            log.info("the time budget is spent: no new trials; the running ones finish")
            return True
        if self._limit.spent(self.usage):
            log.info("the budget is spent: no new trials; the running ones finish")
            return True
        return False

    def _room(self) -> bool:
        """Whether an epoch budget has room for one more trial: every trial proposed and not
        ended will train at least one more epoch."""
        epochs = self._limit.epochs
        return epochs is None or self.usage.epochs + len(self._live) < epochs

    @property
    def committed(self) -> float:
        """How much of the budget is spent or promised to the trials still running."""
        epochs = self._limit.epochs
        if epochs is not None:
            return max(self.budget_spent, (self.usage.epochs + len(self._live)) / max(1, epochs))
        return self.budget_spent

    @property
    def budget_spent(self) -> float:
        """How much of the epoch or device-time budget is spent (0 without one)."""
        return self._limit.fraction(self.usage)

    def _start_stored(self, trial: optuna.Trial, trial_id: str) -> int:
        """The stored study's trial for a proposal: the same parameters, RUNNING, and the Ray trial
        it runs as (``ray_trial_id``)."""
        frozen = self._proposals._storage.get_trial(trial._trial_id)
        template = FrozenTrial(
            number=-1, state=TrialState.RUNNING, value=None, values=None,
            datetime_start=frozen.datetime_start, datetime_complete=None, params=frozen.params,
            distributions=frozen.distributions, user_attrs={RAY_TRIAL_ID: trial_id},
            system_attrs={}, intermediate_values={}, trial_id=-1)
        stored_id = self._stored_storage.create_new_trial(self._stored._study_id,
                                                          template_trial=template)
        record_number(trial_id, self._stored_storage.get_trial_number_from_id(stored_id))
        return stored_id

    def _answer_repeat(self, trial: optuna.Trial, earlier: int) -> None:
        """A proposal of a configuration trained to its end: nothing trains, nothing is learned
        (FAIL in the proposal study), the stored study counts it."""
        self._proposals.tell(trial, state=TrialState.FAIL)
        self._repeats += 1
        self._stored.set_user_attr(REPEATS_ANSWERED, self._repeats)
        log.info("a proposal repeats the configuration of trial %d, already trained: not "
                 "trained again", earlier)

    def _end(self, trial_id: str, state: TrialState, values: list[float] | None) -> None:
        proposal_id, stored_id = self._live.pop(trial_id)
        self._last.pop(trial_id, None)
        self._done.add(trial_id)
        stored = self._stored_storage
        last = self._last_value(stored_id)
        if state == TrialState.PRUNED and last is not None and len(self._objectives) == 1:
            values = [last]
        try:
            stored.set_trial_state_values(stored_id, state, values)
        except Exception as exc:  # noqa: BLE001 - e.g. a second tell of a resumed trial
            log.warning("the stored trial of Ray trial %s could not be closed: %s", trial_id, exc)
        self._finish_proposal(proposal_id, state, values)
        if state == TrialState.COMPLETE:
            params = stored.get_trial(stored_id).params
            self._trained.setdefault(_key(params), stored.get_trial(stored_id).number)

    def _last_value(self, stored_id: int) -> float | None:
        values = self._stored_storage.get_trial(stored_id).intermediate_values
        return values[max(values)] if values else None

    def _finish_proposal(self, proposal_id: int, state: TrialState,
                         values: Sequence[float] | None) -> None:
        storage = self._proposals._storage
        if storage.get_trial(proposal_id).state.is_finished():
            return
        storage.set_trial_state_values(proposal_id, state, list(values) if values else None)

    def _fail(self, trial_id: str, reason: str) -> None:
        ids = self._live.get(trial_id)
        if ids is None:
            return
        try:
            self._stored_storage.set_trial_user_attr(ids[1], REASON, reason[:2000])
        except Exception as exc:  # noqa: BLE001 - the state matters more than the reason
            log.warning("could not record why trial %s failed: %s", trial_id, exc)
        self._end(trial_id, TrialState.FAIL, None)
