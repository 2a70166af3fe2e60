"""What a search knows about its trials and its outcome, typed: one :class:`TrialRecord` per Ray
trial (its configuration already in setting keys), the ranking rules (best first, the Pareto
front), the budget used, and :class:`Summary`, the one schema of ``summary.json``, written and
read here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import numpy as np

from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.trainables.errors import UserError

__all__ = ["COUNTS", "Budget", "EnsembleSummary", "EvalSet", "ParetoSummary", "RetrainSummary",
           "StudyInfo", "Summary", "TrialRecord", "TrialState", "best", "budget_used", "dominates",
           "mean_ci95", "pareto_front", "pareto_records", "rank", "rank_partial", "read_summary",
           "scores_only", "trajectory", "write_summary"]

SUMMARY_FORMAT = 2  # 1: the unversioned summary.json of dmlsearch before the layout of #16


class TrialState(str, enum.Enum):
    COMPLETED = "completed"  # trained to its last epoch
    PRUNED = "pruned"  # stopped early (by the scheduler, or a hard time budget)
    FAILED = "failed"  # its own failure (NaN loss, out of memory, unreadable data) or a crash
    UNFINISHED = "unfinished"  # an interrupted search's trial that had not ended


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    """One trial of a search: its configuration (setting keys, e.g. ``loss.margin``), how it
    ended, and its score (the best validation metric it reached; k-fold: the mean over fits)."""

    trial_id: str
    config: dict[str, Any]
    state: TrialState
    score: float | None = None
    score_std: float | None = None  # spread of the fits' bests (k-fold, repeats)
    fits: int = 1  # fits scored (folds × repeats done)
    best_epoch: int | None = None
    iterations: int = 0  # epochs trained, over all fits
    seconds: float = 0.0
    reason: str | None = None  # why it failed
    stopped_by: str | None = None  # who pruned it: the scheduler's name or "time budget"
    cost: float | None = None  # the --pareto cost
    started: float | None = None  # Unix time
    path: str | None = None  # its folder in Ray Tune's storage
    # its score after each iteration (None before its first validation)
    curve: list[float | None] = dataclasses.field(default_factory=list)
    number: int | None = None  # its number in the search's Optuna study (Optuna's "Trial 7")

    @property
    def name(self) -> str:
        """What the terminal, MLflow's run names, the report and the plots call it: ``t07`` for
        the study's trial 7 (:func:`dmlsearch.search.tune.study.trial_name`); Ray's id when the
        study did not number it."""
        return self.trial_id if self.number is None else f"t{self.number:02d}"

    @property
    def scored(self) -> bool:
        return (self.state is not TrialState.FAILED and self.score is not None
                and math.isfinite(self.score))

    @property
    def fits_planned(self) -> int:
        """The fits a whole training of its configuration makes (``fits``: those scored): its
        folds (k-fold) times its repeats; its epochs are counted over all of them."""
        folds = int(self.config.get("folds") or 1) if self.config.get("protocol") == "kfold" else 1
        return folds * max(1, int(self.config.get("repeats") or 1))

    @property
    def full_budget(self) -> bool:
        """Trained to its end, with a score: comparable with the other completed trials."""
        return self.state is TrialState.COMPLETED and self.scored

    def score_at(self, iteration: int) -> float | None:
        """Its score after ``iteration`` epochs (over all folds), if it trained that far."""
        if 1 <= iteration <= len(self.curve):
            return self.curve[iteration - 1]
        return None

    def to_json(self) -> dict[str, Any]:
        body = dataclasses.asdict(self)
        body["state"] = self.state.value
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> TrialRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in body.items() if k in known}
        state = values.get("state", "unfinished")
        values["state"] = TrialState("pruned" if state == "stopped" else state)
        values["config"] = dict(values.get("config") or {})
        return cls(**values)


# ---- ranking ------------------------------------------------------------------------------------
# Everything that ranks compares trials at one budget: the trials that trained to their end.
# A trial the scheduler stopped after 2 epochs has a 2-epoch score; ranked with 8-epoch scores it
# would mostly rank the budgets.

def rank(records: Iterable[TrialRecord], mode: str) -> list[TrialRecord]:
    """The trials that trained to their end, best first in the metric's direction (``mode``
    "max" or "min"); equal scores keep their order."""
    sign = -1.0 if mode == "max" else 1.0
    return sorted((r for r in records if r.full_budget), key=lambda r: sign * float(r.score or 0))


def best(records: Iterable[TrialRecord], mode: str) -> TrialRecord | None:
    ranked = rank(records, mode)
    return ranked[0] if ranked else None


def rank_partial(records: Iterable[TrialRecord], mode: str) -> list[TrialRecord]:
    """The scored trials that did not train to their end (pruned, or unfinished in an
    interrupted search), deepest first and, at equal depth, best first: the order Optuna's TPE
    gives pruned trials."""
    sign = -1.0 if mode == "max" else 1.0
    return sorted((r for r in records if r.scored and not r.full_budget),
                  key=lambda r: (-r.iterations, sign * float(r.score or 0)))


def dominates(a: Sequence[float], b: Sequence[float], modes: Sequence[str]) -> bool:
    """Whether ``a`` is at least as good as ``b`` in every objective and better in one."""
    if not all((x >= y if m == "max" else x <= y) for x, y, m in zip(a, b, modes, strict=True)):
        return False
    return any(x != y for x, y in zip(a, b))


def pareto_front(points: Sequence[Sequence[float]], modes: Sequence[str]) -> list[int]:
    """Indices of the non-dominated ``points``, best first by the first objective. Equal points
    are all kept (none dominates the other). O(n²): a search has hundreds of trials."""
    if any(m not in ("max", "min") for m in modes):
        raise ValueError(f"modes must be 'max' or 'min', got {list(modes)}")
    front = [i for i, p in enumerate(points)
             if not any(dominates(q, p, modes) for j, q in enumerate(points) if j != i)]
    sign = -1.0 if modes[0] == "max" else 1.0
    return sorted(front, key=lambda i: (sign * points[i][0], i))


def pareto_records(records: Iterable[TrialRecord], mode: str) -> list[TrialRecord]:
    """The non-dominated trials of a ``--pareto`` search that trained to their end: best metric
    against lowest cost."""
    scored = [r for r in records if r.full_budget and r.cost is not None]
    front = pareto_front([(float(r.score or 0.0), float(r.cost or 0.0)) for r in scored],
                         (mode, "min"))
    return [scored[i] for i in front]


# ---- budget -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Budget:
    """What a search cost: trials, epochs trained (over folds and repeats), reserved hours."""

    trials: int = 0
    epochs: int = 0
    trial_hours: float = 0.0
    cpu_hours: float = 0.0
    gpu_hours: float = 0.0


def over_fits(records: Iterable[TrialRecord]) -> str:
    """What follows "epochs" in the search's epoch counts: nothing, or, when a trial fits
    several folds or repeats, that they are counted over all of them."""
    return " (counted over folds and repeats)" if any(r.fits_planned > 1 for r in records) else ""


def budget_used(records: Sequence[TrialRecord], *, cpus_per_trial: float,
                gpus_per_trial: float) -> Budget:
    seconds = sum(r.seconds for r in records)
    return Budget(trials=len(records), epochs=sum(r.iterations for r in records),
                  trial_hours=seconds / 3600, cpu_hours=seconds * cpus_per_trial / 3600,
                  gpu_hours=seconds * gpus_per_trial / 3600)


def trajectory(records: Sequence[TrialRecord], mode: str) -> list[tuple[int, float]]:
    """A search's best-so-far against its budget: (epochs trained by all its trials, the best
    score of the trials that trained to their end) at each improvement. Each trial's epochs are
    placed in time evenly over its run (its start and duration), so trials that ran at once
    interleave as they did."""
    events: list[tuple[float, int, float | None]] = []  # (time, finishes a trial?, score)
    for record in records:
        if record.started is None or not record.iterations:
            continue
        n = record.iterations
        for i in range(n):
            last = i == n - 1 and record.state is TrialState.COMPLETED
            events.append((record.started + record.seconds * (i + 1) / n, int(last),
                           record.score if last else None))
    best: float | None = None
    points: list[tuple[int, float]] = []
    for epochs, (_, finishes, score) in enumerate(sorted(events, key=lambda e: e[0]), 1):
        if finishes and score is not None and (
                best is None or (score > best if mode == "max" else score < best)):
            best = score
            points.append((epochs, score))
    return points


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of the two-sided 95% Student-t interval (0 for one value, for which
    no interval exists: callers report it as none, :class:`RetrainSummary` as null): how a
    configuration retrained with several seeds, and a comparison's method, are reported."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return float(x.mean()), 0.0
    from scipy.stats import t  # scipy is slow to import; this module is on --help's path

    return float(x.mean()), float(t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))


# ---- summary.json -------------------------------------------------------------------------------
COUNTS = frozenset({"num_queries", "verify_trials"})
"""What an evaluation reports beside its scores that is a count (queries averaged over,
verification trials scored): the size of the set, never a metric to average or rank."""


def scores_only(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` without the counts (:data:`COUNTS`)."""
    return {k: v for k, v in metrics.items() if k not in COUNTS}


@dataclasses.dataclass(frozen=True)
class EvalSet:
    """The classes a score is measured on, and how many: classes, images, and queries (the
    images with another image of their class, over which retrieval metrics are averaged). A
    k-fold validation's classes are split into ``folds`` class-disjoint folds, each scored on its
    own (the trial's score is the mean over folds); the counts are over all folds."""

    classes: int
    images: int
    queries: int
    folds: int = 1

    @classmethod
    def of(cls, class_images: Sequence[int], classes: Iterable[int], *,
           folds: int = 1) -> EvalSet:
        """The set of ``classes`` (ids) of a dataset with ``class_images[c]`` images of class
        ``c``; a class with one image has no query (nothing of its class to retrieve)."""
        ids = sorted({int(c) for c in classes})
        sizes = [int(class_images[c]) for c in ids]
        return cls(classes=len(ids), images=sum(sizes), queries=sum(n for n in sizes if n >= 2),
                   folds=folds)

    @classmethod
    def of_labels(cls, labels: Sequence[int] | np.ndarray, classes: Iterable[int]) -> EvalSet:
        """The set of ``classes`` of a dataset whose images are labelled ``labels``."""
        ids = list(classes)
        return cls.of(np.bincount(np.asarray(labels, dtype=np.int64),
                                  minlength=max((int(c) for c in ids), default=-1) + 1), ids)


@dataclasses.dataclass(frozen=True)
class StudyInfo:
    """What the search was: its name, space, data, metric and methods."""

    name: str
    space: str
    dataset: str
    protocol: str
    metric: str
    mode: str  # "max" or "min"
    sampler: str
    scheduler: str
    searched: tuple[str, ...]  # the setting keys the space searched
    first_rung: int | None = None  # the epoch (over folds) of the scheduler's first decision
    max_iterations: int | None = None  # the longest a trial trains (epochs × folds × repeats)
    grid_size: int | None = None  # a grid study: the whole grid's points (trials: those run)
    replay: str | None = None  # replayed from this learning-curve table (nothing trained)
    # The budget a search was given: --trials N is N full trainings' worth of epochs
    # (budget_epochs = N x max_iterations, or --epoch-budget), which early stopping spreads over
    # more, shorter trials; budget_epochs None: N trials, each to its end (no early stopping).
    budget_trials: int | None = None
    budget_epochs: int | None = None
    # The CPU threads the retrain computed with when the search chose the trials' count itself
    # (the driver's CPUs); None: the trials' own setting. `dmlsearch export` records it too.
    retrain_threads: int | None = None
    # --prior-from: the finished searches it started from and the points it took (transfer.py)
    transfer: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class RetrainSummary:
    """One configuration retrained on all training classes with one or more seeds."""

    trial_id: str
    rank: int  # 1 = the search's best
    seeds: list[int]
    test_metrics: list[dict[str, float]]  # one per seed
    mean: dict[str, float]
    # half-width of the 95% Student-t interval; None with one seed (a single value has none)
    ci95: dict[str, float | None]
    epochs: int | None = None  # trained for (the trial's best validation epoch)
    seconds: float = 0.0  # all seeds together

    def __post_init__(self) -> None:
        """One seed gives no interval: its ``ci95`` values are None (null in summary.json), also
        when read from a summary written when they were 0.0."""
        if len(self.seeds) < 2:
            object.__setattr__(self, "ci95", {k: None for k in self.ci95})

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RetrainSummary:
        return cls(**body)


@dataclasses.dataclass(frozen=True)
class EnsembleSummary:
    """A k-fold study's fold models on the test classes (MLRC protocol)."""

    metrics: dict[str, float]  # ensemble_*, folds_mean_*, folds_std_*
    fold_test_metrics: list[dict[str, float]]
    fold_best_epochs: list[int]
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class ParetoSummary:
    cost: str
    trial_ids: list[str]


@dataclasses.dataclass(frozen=True)
class Summary:
    """A search's outcome: ``summary.json``. ``finished`` is False for a summary built from an
    interrupted search's trial folders (:func:`dmlsearch.search.tune.read_trial_folders`)."""

    study: StudyInfo
    trials: list[TrialRecord]
    seconds: float | None = None
    tracking_uri: str | None = None
    repeats_answered: int = 0
    best_trial: str | None = None
    budget: Budget | None = None
    pareto: ParetoSummary | None = None
    test_metrics: dict[str, float] | None = None  # the best configuration's first retrain
    registered_model: str | None = None
    retrains: list[RetrainSummary] = dataclasses.field(default_factory=list)
    fold_ensemble: EnsembleSummary | None = None
    export: str | None = None
    finished: bool = True
    validation_set: EvalSet | None = None  # the classes trials were scored on (best trial's)
    test_set: EvalSet | None = None  # the test classes the retrain was tested on
    # --intensify: the best configurations' two fits (search/intensify.py), best mean first
    intensified: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def trial(self, trial_id: str | None) -> TrialRecord | None:
        return next((t for t in self.trials if t.trial_id == trial_id), None)

    def counts(self) -> dict[str, int]:
        """How many trials ended in each state (every state listed, zeros included)."""
        return {s.value: sum(t.state is s for t in self.trials) for s in TrialState
                if s is not TrialState.UNFINISHED or not self.finished}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": SUMMARY_FORMAT,
            "study": {**dataclasses.asdict(self.study), "searched": list(self.study.searched)},
            "seconds": self.seconds, "tracking_uri": self.tracking_uri,
            "trials": [t.to_json() for t in self.trials],
            "trial_counts": self.counts(),
            "repeats_answered": self.repeats_answered,
            "best_trial": self.best_trial,
            "budget": None if self.budget is None else dataclasses.asdict(self.budget),
            "pareto_front": None if self.pareto is None else {
                "cost": self.pareto.cost,
                "trials": [{"trial_id": t.trial_id, "score": t.score, "cost": t.cost}
                           for t in (self.trial(i) for i in self.pareto.trial_ids) if t]},
            "test_metrics": self.test_metrics, "registered_model": self.registered_model,
            "retrains": [dataclasses.asdict(r) for r in self.retrains],
            "fold_ensemble": None if self.fold_ensemble is None
            else dataclasses.asdict(self.fold_ensemble),
            "export": self.export,
            "validation_set": _eval_set_json(self.validation_set),
            "test_set": _eval_set_json(self.test_set),
            "intensified": self.intensified,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Summary:
        if body.get("format") != SUMMARY_FORMAT:
            raise ValueError(f"summary format {body.get('format')!r}, expected {SUMMARY_FORMAT}")
        study = dict(body["study"])
        study["searched"] = tuple(study.get("searched") or ())
        pareto = body.get("pareto_front")
        ensemble = body.get("fold_ensemble")
        return cls(
            study=StudyInfo(**study),
            trials=[TrialRecord.from_json(t) for t in body.get("trials") or []],
            seconds=body.get("seconds"), tracking_uri=body.get("tracking_uri"),
            repeats_answered=int(body.get("repeats_answered") or 0),
            best_trial=body.get("best_trial"),
            budget=None if body.get("budget") is None else Budget(**body["budget"]),
            pareto=None if pareto is None else ParetoSummary(
                cost=pareto["cost"], trial_ids=[t["trial_id"] for t in pareto["trials"]]),
            test_metrics=body.get("test_metrics"),
            registered_model=body.get("registered_model"),
            retrains=[RetrainSummary.from_json(r) for r in body.get("retrains") or []],
            fold_ensemble=None if ensemble is None else EnsembleSummary(**ensemble),
            export=body.get("export"),
            validation_set=_eval_set(body.get("validation_set")),
            test_set=_eval_set(body.get("test_set")),
            intensified=list(body.get("intensified") or []),
        )


def _eval_set_json(value: EvalSet | None) -> dict[str, int] | None:
    return None if value is None else dataclasses.asdict(value)


def _eval_set(body: Mapping[str, Any] | None) -> EvalSet | None:
    """Absent in a summary written before the sets were recorded."""
    return None if not body else EvalSet(**body)


def write_summary(study_dir: StudyDir, summary: Summary) -> None:
    write_atomic(study_dir.summary_json,
                 json.dumps(summary.to_json(), indent=2, default=_plain) + "\n")


def read_summary(study_dir: StudyDir) -> Summary | None:
    """``summary.json`` of a finished search; ``None`` when the search has not finished."""
    path = study_dir.summary_json
    if not path.is_file():
        return None
    try:
        return Summary.from_json(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path} is not a summary this dmlsearch reads ({exc}); it is written "
                        "by `dmlsearch run` when a search finishes (run the search again with "
                        "this version)") from None


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if hasattr(value, "item"):  # NumPy scalars
        return value.item()
    return str(value)
