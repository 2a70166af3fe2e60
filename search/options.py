"""The options of ``dmlsearch run``, typed, and how they turn into a space with overrides."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from dmlsearch.search.tune import SAMPLERS
from dmlsearch.search.tune import SCHEDULERS
from dmlsearch.spaces import parse_value
from dmlsearch.trainables.errors import UserError

__all__ = [
    "COSTS", "DEFAULT_TRIALS", "STORAGE_SCHEMES", "SearchOptions", "check_storage",
    "data_workers", "parse_duration", "parse_sets", "resolve_storage",
]

DEFAULT_TRIALS = 10
COSTS: dict[str, str] = {
    "embedding_size": "the embedding's dimension (index size, kNN cost)",
    "parameters": "the model's parameter count (backbone + embedding layer)",
}


def user_settings(opts: Any) -> dict[str, Any]:
    """The trial settings a command's options give (``seed``; ``dataset``, ``data_root``,
    ``protocol`` when set; every ``--set``): what beats a space file's values. Shared by
    ``run`` (:class:`SearchOptions`) and ``compare`` (every method alike)."""
    out: dict[str, Any] = {"seed": opts.seed}
    for key in ("dataset", "data_root", "protocol"):
        if getattr(opts, key) is not None:
            out[key] = getattr(opts, key)
    out.update(dict(opts.sets))
    return out


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    space: str = "quickstart"
    dataset: str | None = None
    data_root: str | None = None
    protocol: str | None = None
    trials: int | None = None  # None: DEFAULT_TRIALS, or the whole grid with sampler grid
    concurrency: int = 2
    out: Path | None = None
    seed: int = 0
    sets: tuple[tuple[str, Any], ...] = ()
    mlflow_uri: str | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None  # None: 1 when a GPU is visible, else 0
    grace_period: int | None = None
    reduction_factor: int = 3
    retrain: bool = True
    sampler: str = "tpe"
    scheduler: str = "asha"
    time_budget_s: float | None = None  # soft: no trial starts after this; running ones finish
    time_limit_s: float | None = None  # hard: running trials are stopped too
    epoch_budget: int | None = None  # soft: no trial starts once this many epochs were trained
    pareto: str | None = None  # a cost to minimise beside the metric (multi-objective)
    max_failures: int = 2  # retries of a trial whose process or node died (from its checkpoint)
    storage: str | None = None  # Ray Tune's results and checkpoints; None: <out>/ray
    retrain_top: int = 1  # retrain the K best configurations
    seeds: int = 1  # each retrained with S seeds: mean ± 95% interval of the test metrics
    register: bool = True  # the best retrained model into the MLflow Model Registry
    replay: str | None = None  # a learning-curve table: trials replay it instead of training
    replay_speedup: float = 100.0  # a replayed epoch lasts its recorded CPU time / this
    preview: bool = False  # the space on the built-in glyphs data, sized for a CPU

    def overrides(self) -> dict[str, Any]:
        """Settings that replace the space's base or searched values (CLI beats space file)."""
        return user_settings(self)

    def to_json(self) -> dict[str, Any]:
        """The options as ``search.yaml`` records them (``resume`` reads them back)."""
        body = dataclasses.asdict(self)
        body["out"] = str(self.out) if self.out else None
        if Path(self.space).is_file():  # a space file: found again from anywhere by resume
            body["space"] = str(Path(self.space).resolve())
        body["sets"] = {k: v for k, v in self.sets}
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any], *, out: Path) -> SearchOptions:
        fields = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in body.items() if k in fields}
        known["out"] = out
        known["sets"] = tuple((k, v) for k, v in (body.get("sets") or {}).items())
        return cls(**known)

    def check(self) -> None:
        if self.trials is not None and self.trials < 1:
            raise UserError(f"--trials must be >= 1, got {self.trials}")
        sampler = SAMPLERS.get(self.sampler)  # unknown names: an error listing the valid ones
        SCHEDULERS.get(self.scheduler)
        if self.pareto is not None and self.pareto not in COSTS:
            raise UserError(f"--pareto must be one of {', '.join(COSTS)}, got {self.pareto!r}")
        if self.pareto is not None and sampler.single_objective:
            multi = [n for n in SAMPLERS.names() if not SAMPLERS.get(n).single_objective]
            raise UserError(
                f"--sampler {self.sampler} optimises one objective, but --pareto asks for two; "
                f"use --sampler {', '.join(multi)}"
            )
        if sampler.multi_objective_only and self.pareto is None:
            raise UserError(f"--sampler {self.sampler} is for multi-objective searches; add "
                            f"--pareto {'|'.join(COSTS)} or use --sampler tpe")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise UserError(f"--time-budget must be > 0, got {self.time_budget_s:g} s")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise UserError(f"--time-limit must be > 0, got {self.time_limit_s:g} s")
        if (self.time_limit_s is not None and self.time_budget_s is not None
                and self.time_limit_s < self.time_budget_s):
            raise UserError(
                f"--time-limit ({self.time_limit_s:g} s) stops everything before --time-budget "
                f"({self.time_budget_s:g} s) stops starting trials; give a longer --time-limit "
                "or leave one out")
        if self.epoch_budget is not None and self.epoch_budget < 1:
            raise UserError(f"--epoch-budget must be >= 1, got {self.epoch_budget}")
        if self.concurrency < 1:
            raise UserError(f"--concurrency must be >= 1, got {self.concurrency}")
        if self.cpus_per_trial <= 0:
            raise UserError(f"--cpus-per-trial must be > 0, got {self.cpus_per_trial}")
        if self.gpus_per_trial is not None and self.gpus_per_trial < 0:
            raise UserError(f"--gpus-per-trial must be >= 0, got {self.gpus_per_trial}")
        if self.reduction_factor < 2:
            raise UserError(f"--reduction-factor must be >= 2, got {self.reduction_factor}")
        if self.max_failures < 0:
            raise UserError(f"--max-failures must be >= 0 (retries of a trial whose node died), "
                            f"got {self.max_failures}; use 0 to never retry")
        if self.storage is not None:
            check_storage(self.storage)
        if self.retrain_top < 1:
            raise UserError(f"--retrain-top must be >= 1, got {self.retrain_top}")
        if self.seeds < 1:
            raise UserError(f"--seeds must be >= 1, got {self.seeds} (1: the trial's own seed)")
        if self.replay_speedup <= 0:
            raise UserError(f"--replay-speedup must be > 0, got {self.replay_speedup:g}")
        if self.preview and self.replay is not None:
            raise UserError("--preview trains the space on the built-in data, --replay trains "
                            "nothing; leave out one of them")
        if self.replay is not None and self.pareto is not None:
            raise UserError("--pareto needs each trial's model (its size), which a replay does "
                            "not build; leave out --pareto or --replay")


def parse_sets(items: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    """``["epochs=3", "loss=proxy_anchor"]`` → typed pairs (values parsed as YAML scalars)."""
    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects KEY=VALUE (e.g. --set epochs=3), got {item!r}")
        try:
            value = parse_value(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        if isinstance(value, (dict, list)):
            raise UserError(f"--set {key} takes a single value, got {raw!r}")
        pairs.append((key.strip(), value))
    return tuple(pairs)


STORAGE_SCHEMES = ("s3", "gs", "gcs", "file", "hdfs", "abfs", "abfss")  # what pyarrow opens


def check_storage(storage: str) -> None:
    """``--storage``: a folder every node sees (NFS) or a bucket URI Ray Tune writes to."""
    scheme, sep, rest = storage.strip().partition("://")
    if not storage.strip() or (sep and (scheme.lower() not in STORAGE_SCHEMES
                                        or not rest.strip("/"))):
        raise UserError(
            "--storage must be a folder all nodes share (e.g. /mnt/nfs/dmlsearch) or a "
            f"{', '.join(s + '://' for s in STORAGE_SCHEMES)} URI with a bucket, got "
            f"{storage!r}; fix the path or URI")


def resolve_storage(storage: str) -> str:
    """``--storage`` as the search records it: a URI as given, a folder made absolute (trials
    on other nodes and a later ``dmlsearch resume`` from elsewhere read the same folder)."""
    if "://" in storage or not storage.strip():
        return storage
    return str(Path(storage).expanduser().resolve())


def data_workers(cpus_per_trial: float) -> int:
    """Data-loading processes of a trial that reserves ``cpus_per_trial`` CPUs: one CPU trains,
    the others decode and augment images (one CPU: load in the trial's own process)."""
    return max(0, int(cpus_per_trial) - 1)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, option: str = "--time-budget") -> float:
    """``"90"``, ``"90s"``, ``"30m"``, ``"2h"``, ``"1.5d"`` → seconds."""
    raw = text.strip().lower()
    unit = raw[-1:] if raw[-1:] in _UNITS else "s"
    number = raw[:-1] if raw[-1:] in _UNITS else raw
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise UserError(f"{option} expects a duration such as 90s, 30m or 2h, got {text!r}"
                        ) from None
    if not seconds > 0:
        raise UserError(f"{option} must be > 0, got {text!r}")
    return seconds
