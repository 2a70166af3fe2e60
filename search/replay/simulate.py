"""A replayed search on a simulated clock (issue 36): every epoch of a trial takes the seconds
its curve recorded, on a clock of its own, so the search runs exactly ``concurrency`` trials at
once, hears their results in the order a real search of that concurrency would, and gives the
same trials for the same seed on any machine under any load, in a fraction of a Ray replay's
time.

**What runs.** The product's own objects, driven here instead of by Ray Tune's controller: the
searcher (:class:`~dmlsearch.search.tune.searcher.StudySearcher` with its Optuna sampler, warm
starts, repeat answers and epoch budget, made by ``tune.tuner.make_searcher``), and the
scheduler of ``--scheduler`` (Ray's ``ASHAScheduler``, ``MedianStoppingRule``,
``FIFOScheduler``; the product's ``SoftASHA`` and repaired ``HyperBand``), called through the
interface Ray's controller calls them with (``on_trial_add``, ``on_trial_result``,
``on_trial_complete``, ``on_trial_remove``, ``on_trial_error``, ``choose_trial_to_run``). Any
proposer with Ray's ``Searcher`` interface runs the same way (the thesis's sweep:
:mod:`.sweep`).

**The controller's rules, as Ray Tune's ``TuneController`` applies them** (Ray 2.60):

- a trial is proposed while fewer than ``concurrency`` trials are live (proposed and not ended;
  a paused trial keeps its place: the product's ``ConcurrencyLimiter``) and the proposer has
  not said ``FINISHED`` (the searcher says it once the epoch budget is spent: the running
  trials then finish) nor ``num_samples`` trials exist; each live trial has a CPU of its own,
  so a trial starts the moment it is proposed, and a paused one the moment its scheduler
  chooses it (``choose_trial_to_run``);
- an epoch's result goes to the scheduler, then (unless it stops the trial) to the searcher;
  a trial the scheduler stops, or that trained its last epoch, ends with the scheduler's and
  the searcher's ``on_trial_complete`` on its last result; a trial stopped while paused with
  their ``on_trial_remove`` and ``on_trial_complete`` without one; a failed training (a table's
  failed curve) fails after its last recorded epoch (``on_trial_error``, the searcher told of
  the error and its reason);
- results at the same simulated instant are heard in the order their epochs were started.

**Training noise** (``noise_seed``, off by default): each trial replays its own draw of its
configuration's recorded seeds, or of noise fitted to the table's seed-to-seed spread
(:mod:`.noise`), drawn from the seed and the trial's id, so a noisy search is as reproducible
as a noiseless one.

Nothing else costs time: no start-up, no checkpoint, no driver overhead (a real search adds
about 0.1-0.2 s per trial: docs/benchmarks.md, driver overhead). A wall-clock budget
(``--time-budget``, ``--time-limit``) has no meaning here and is refused.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from typing import Protocol
from typing import cast

from dmlsearch.search.replay.epochs import ReplayedEpoch
from dmlsearch.search.replay.epochs import replay_epochs
from dmlsearch.search.results import TrialState
from dmlsearch.search.tune.ray_results import SCORE
from dmlsearch.search.tune.settings import TrialEvents
from dmlsearch.search.tune.settings import TuneSettings
from dmlsearch.search.tune.trainable import report_row
from dmlsearch.trainables.errors import TrialFailed

__all__ = ["FINISHED", "Proposer", "SimulatedResult", "SimulatedTrial", "Simulation", "simulate",
           "simulate_search"]

# Ray Tune's words, as its schedulers and searchers use them (ray.tune.experiment.Trial's
# statuses, ray.tune.schedulers.TrialScheduler's decisions, ray.tune.search.Searcher.FINISHED;
# tests/search/replay/test_simulate.py checks they are Ray's).
PENDING, RUNNING, PAUSED, TERMINATED, ERROR = "PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR"
CONTINUE, PAUSE, STOP, NOOP = "CONTINUE", "PAUSE", "STOP", "NOOP"
FINISHED = "FINISHED"


class Proposer(Protocol):
    """What proposes a simulated search's trials: Ray Tune's ``Searcher`` interface. ``suggest``
    returns a trial's configuration, None (nothing now: ask again after the next result) or
    :data:`FINISHED` (no more trials)."""

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None: ...

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None: ...

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None: ...


@dataclasses.dataclass(frozen=True)
class SimulatedResult:
    """One epoch's result, when the search heard it."""

    time: float  # simulated seconds since the search started
    trial_id: str
    epoch: int
    score: float | None  # the trial's best validation score so far (None before one)
    finished: bool  # the trial trained to its end here


@dataclasses.dataclass(frozen=True)
class SimulatedTrial:
    """One trial of a simulated search."""

    trial_id: str
    config: dict[str, Any]
    state: TrialState  # completed, pruned or failed
    epochs: int  # epochs trained
    score: float | None  # its last reported score (the best validation score it reached)
    proposed: float  # when it was proposed (it holds a place of the concurrency from then)
    ended: float  # when it ended (its place is free from then)
    runs: tuple[tuple[float, float], ...]  # (start, end) of each stretch it trained
    reason: str | None = None  # why it failed

    @property
    def started(self) -> float:
        return self.runs[0][0] if self.runs else self.proposed


@dataclasses.dataclass(frozen=True)
class Simulation:
    """A simulated search: its trials in the order they were proposed, every result in the
    order it was heard, when the search stopped proposing and when its last trial ended."""

    concurrency: int
    trials: tuple[SimulatedTrial, ...]
    results: tuple[SimulatedResult, ...]
    proposals_ended: float | None  # the proposer finished (budget spent) or num_samples reached
    end: float

    def running_at(self, time: float) -> int:
        """Trials training at ``time`` (a stretch counts from its start, not at its end)."""
        return sum(start <= time < end for t in self.trials for start, end in t.runs)

    def live_at(self, time: float) -> int:
        """Trials holding a place of the concurrency at ``time`` (paused ones included)."""
        return sum(t.proposed <= time < t.ended for t in self.trials)

    @property
    def epochs(self) -> int:
        return len(self.results)


class _Trial:
    """A trial as the schedulers see one (Ray's ``Trial``: ``trial_id``, ``status``,
    ``is_saving``, ``config``, ``last_result``), and the curve it replays."""

    is_saving = False  # a simulated save takes no time

    def __init__(self, trial_id: str, config: dict[str, Any], epochs: list[ReplayedEpoch],
                 failure: str | None, proposed: float) -> None:
        self.trial_id, self.config = trial_id, config
        self.status = PENDING
        self.last_result: dict[str, Any] = {}
        self.epochs, self.failure = epochs, failure
        self.trained = 0  # epochs trained
        self.time_total = 0.0
        self.proposed = proposed
        self.runs: list[list[float]] = []
        self.token = -1  # the sequence number of its pending event
        self.outcome: SimulatedTrial | None = None

    def __repr__(self) -> str:
        return f"_Trial({self.trial_id}, {self.status})"


def _curve(table: Path | str, config: Mapping[str, Any], draw: tuple[int, str] | None = None
           ) -> tuple[list[ReplayedEpoch], str | None]:
    """The epochs ``config`` replays (``draw``: the trial's draw of training noise), and why its
    training failed after them (None: it did not)."""
    epochs: list[ReplayedEpoch] = []
    try:  # one by one: the epochs before the failure are kept
        for epoch in replay_epochs(table, config, draw=draw):
            epochs.append(epoch)  # noqa: PERF402
    except TrialFailed as exc:
        return epochs, str(exc)
    return epochs, None


class _Clock:
    """The event loop: a heap of (time, sequence, trial, what), popped in that order."""

    def __init__(self, proposer: Proposer, scheduler: Any, *, table: Path | str,
                 concurrency: int, num_samples: int | None, events: TrialEvents | None,
                 on_failure: Callable[[str, str], None] | None,
                 noise_seed: int | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self.proposer, self.scheduler, self.table = proposer, scheduler, table
        self.concurrency, self.num_samples = concurrency, num_samples
        self.events, self.on_failure = events, on_failure
        self.noise_seed = noise_seed
        self.now = 0.0
        self.trials: list[_Trial] = []
        self.live: list[_Trial] = []
        self.results: list[SimulatedResult] = []
        self.heap: list[tuple[float, int, str, _Trial]] = []
        self.sequence = 0
        self.finished = False
        self.proposals_ended: float | None = None

    # ---- what a scheduler may call (Ray's TuneController) ---------------------------------------
    def get_trials(self) -> list[_Trial]:
        return list(self.trials)

    def get_live_trials(self) -> list[_Trial]:
        return list(self.live)

    def stop_trial(self, trial: _Trial) -> None:
        """Ray's ``TuneController.stop_trial``: a pending or paused trial leaves its scheduler
        (``on_trial_remove``) and its searcher without a result; a running one ends on its last
        result."""
        if trial.status in (TERMINATED, ERROR):
            return
        if trial.status in (PENDING, PAUSED):
            self.scheduler.on_trial_remove(self, trial)
            self.proposer.on_trial_complete(trial.trial_id)
        else:
            self.scheduler.on_trial_complete(self, trial, trial.last_result)
            self.proposer.on_trial_complete(trial.trial_id, result=trial.last_result)
        self._end(trial, TERMINATED)

    # ---- the loop -------------------------------------------------------------------------------
    def run(self) -> Simulation:
        self._fill()
        while self.heap:
            time, sequence, what, trial = heapq.heappop(self.heap)
            if trial.status != RUNNING or sequence != trial.token:
                continue  # stopped or paused since
            self.now = time
            if what == "epoch":
                self._epoch(trial)
            else:
                self._end_of_curve(trial)
            self._fill()
        if self.live:
            raise RuntimeError(
                f"the simulated search stopped with {len(self.live)} trial(s) "
                f"{[t.trial_id for t in self.live]} paused and none running: the scheduler "
                "never resumes nor stops them (a real search would hang here)")
        if not self.finished and self.proposals_ended is None:
            raise RuntimeError("the proposer waits for a result, but no trial is running")
        outcomes = [t.outcome for t in self.trials if t.outcome is not None]
        assert len(outcomes) == len(self.trials)
        return Simulation(concurrency=self.concurrency, trials=tuple(outcomes),
                          results=tuple(self.results), proposals_ended=self.proposals_ended,
                          end=max((t.ended for t in outcomes), default=0.0))

    def _fill(self) -> None:
        """Propose trials while there is room, then start every trial that can run."""
        while (not self.finished and len(self.live) < self.concurrency
               and (self.num_samples is None or len(self.trials) < self.num_samples)):
            trial_id = f"{len(self.trials):05d}"
            answer = self.proposer.suggest(trial_id)
            if answer == FINISHED:
                self.finished = True
                break
            if answer is None:
                break
            assert isinstance(answer, dict)
            config = dict(answer)
            draw = None if self.noise_seed is None else (self.noise_seed, trial_id)
            trial = _Trial(trial_id, config, *_curve(self.table, config, draw),
                           proposed=self.now)
            self.trials.append(trial)
            self.live.append(trial)
            self.scheduler.on_trial_add(self, trial)
        if self.proposals_ended is None and (self.finished or (
                self.num_samples is not None and len(self.trials) >= self.num_samples)):
            self.proposals_ended = self.now
        # Ray starts every pending trial its resources allow (here: all), then the one its
        # scheduler chooses, until it chooses none (a paused trial it resumes)
        for trial in list(self.live):
            if trial.status == PENDING:
                self._start(trial)
        while True:
            chosen = self.scheduler.choose_trial_to_run(self)
            if chosen is None or chosen.status not in (PENDING, PAUSED):
                break
            self._start(chosen)

    def _start(self, trial: _Trial) -> None:
        if not trial.runs and self.events is not None:
            self.events.trial_started(trial.trial_id, dict(trial.config))
        trial.status = RUNNING
        trial.runs.append([self.now, math.nan])
        if trial.trained < len(trial.epochs):
            self._schedule(trial, trial.epochs[trial.trained].seconds, "epoch")
        else:  # resumed after its last epoch, or a curve without one: it ends now
            self._schedule(trial, 0.0, "end")

    def _schedule(self, trial: _Trial, seconds: float, what: str) -> None:
        self.sequence += 1
        trial.token = self.sequence
        heapq.heappush(self.heap, (self.now + seconds, self.sequence, what, trial))

    def _epoch(self, trial: _Trial) -> None:
        epoch = trial.epochs[trial.trained]
        trial.trained += 1
        trial.time_total += epoch.seconds
        result = {**report_row(epoch, worst=epoch.worst), "trial_id": trial.trial_id,
                  "time_this_iter_s": epoch.seconds, "time_total_s": trial.time_total,
                  "done": False}
        score = epoch.score if epoch.score is not None and math.isfinite(epoch.score) else None
        self.results.append(SimulatedResult(self.now, trial.trial_id, epoch.epoch, score,
                                            bool(epoch.last)))
        if self.events is not None:
            self.events.trial_result(trial.trial_id, result)
        decision = self.scheduler.on_trial_result(self, trial, result)
        if decision == STOP:
            result["done"] = True
        else:
            self.proposer.on_trial_result(trial.trial_id, result)
        trial.last_result = result
        if trial.status != RUNNING:  # the scheduler ended it while deciding (Ray: no action)
            return
        if decision == STOP:
            self.stop_trial(trial)
        elif decision == PAUSE:
            trial.status = PAUSED
            trial.runs[-1][1] = self.now
        elif decision == CONTINUE:
            if trial.trained < len(trial.epochs):
                self._schedule(trial, trial.epochs[trial.trained].seconds, "epoch")
            else:
                self._end_of_curve(trial)
        else:
            raise RuntimeError(f"the simulated clock does not take the decision {decision!r}")

    def _end_of_curve(self, trial: _Trial) -> None:
        """The trial's training returned (Ray's duplicate last result, ``done``), or failed."""
        if trial.failure is None:
            trial.last_result = {**trial.last_result, "done": True}
            self.stop_trial(trial)
            return
        self.scheduler.on_trial_error(self, trial)
        self.proposer.on_trial_complete(trial.trial_id, error=True)
        if self.on_failure is not None:
            self.on_failure(trial.trial_id, trial.failure)
        self._end(trial, ERROR)

    def _end(self, trial: _Trial, status: str) -> None:
        if trial.status == RUNNING:
            trial.runs[-1][1] = self.now
        trial.status = status
        if trial in self.live:
            self.live.remove(trial)
        finished = bool(trial.last_result.get("trial_finished"))
        state = (TrialState.FAILED if status == ERROR else
                 TrialState.COMPLETED if finished else TrialState.PRUNED)
        score = trial.last_result.get(SCORE)
        trial.outcome = SimulatedTrial(
            trial_id=trial.trial_id, config=trial.config, state=state, epochs=trial.trained,
            score=float(score) if isinstance(score, (int, float)) and math.isfinite(score)
            else None, proposed=trial.proposed, ended=self.now,
            runs=tuple((start, end) for start, end in trial.runs),
            reason=trial.failure if status == ERROR else None)
        if self.events is not None:
            self.events.trial_finished(trial.trial_id, state.value, trial.failure
                                       if status == ERROR else None)


def simulate(proposer: Proposer, scheduler: Any, *, table: Path | str, concurrency: int,
             mode: str = "max", num_samples: int | None = None,
             events: TrialEvents | None = None,
             on_failure: Callable[[str, str], None] | None = None,
             noise_seed: int | None = None) -> Simulation:
    """A search of ``proposer``'s trials, each replaying its curve of ``table``, stopped and
    paused by ``scheduler`` (a Ray Tune scheduler), ``concurrency`` at a time on a simulated
    clock (module docstring). ``events`` hears the trials as a real search's listeners do;
    ``on_failure(trial_id, reason)`` is told why a trial failed, after its proposer was told
    that it did. ``noise_seed``: each trial draws its training noise from it and its id
    (:mod:`.noise`); None: none, every trial replays the table's curve."""
    scheduler.set_search_properties(SCORE, mode)
    return _Clock(proposer, scheduler, table=table, concurrency=concurrency,
                  num_samples=num_samples, events=events, on_failure=on_failure,
                  noise_seed=noise_seed).run()


def simulate_search(settings: TuneSettings, *, define_by_run: Callable[[Any], dict[str, Any]],
                    warm_starts: list[dict[str, Any]], events: TrialEvents | None = None,
                    keep_study: bool = False, noise: bool = False) -> Simulation:
    """The replayed search ``tune.run_tune(settings, ...)`` runs through Ray Tune, on the
    simulated clock: the same searcher (``settings.sampler``, the warm starts, the epoch budget
    ``settings.max_epochs``) and scheduler (``settings.scheduler``), ``settings.concurrency``
    trials at a time, each replaying its curve of ``settings.replay``. The searcher's stored
    study is kept in memory (its every-epoch writes to SQLite would take most of the time),
    or with ``keep_study`` in ``settings.optuna_storage``. ``noise``: each trial draws its
    training noise (:mod:`.noise`) from ``settings.seed`` and its id."""
    import optuna

    from dmlsearch.search.tune.schedulers import make_scheduler
    from dmlsearch.search.tune.searcher import end_failed_trial
    from dmlsearch.search.tune.tuner import make_searcher

    if settings.replay is None:
        raise ValueError("a simulated search replays a learning-curve table (settings.replay)")
    if settings.time_budget_s is not None or settings.time_limit_s is not None:
        raise ValueError("a simulated search's budget is in epochs (max_epochs): a wall-clock "
                         "budget has no meaning on its clock")
    if settings.pareto is not None:
        raise ValueError("a replayed trial reports no cost: a simulated search has one "
                         "objective")
    if not keep_study:  # the searcher hands its storage to optuna.create_study, which takes a
        # storage object as well as a URL
        settings = dataclasses.replace(
            settings, optuna_storage=cast(str, optuna.storages.InMemoryStorage()))
    searcher = make_searcher(settings, define_by_run=define_by_run, warm_starts=warm_starts)
    scheduler = make_scheduler(settings)
    return simulate(searcher, scheduler, table=settings.replay, concurrency=settings.concurrency,
                    mode=settings.mode, num_samples=settings.num_samples, events=events,
                    on_failure=end_failed_trial,
                    noise_seed=int(settings.seed or 0) if noise else None)
