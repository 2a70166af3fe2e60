"""The options of ``dmlsearch compare``, typed; each method's search options derive from them
(one place decides what the methods share)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmlsearch.search.compare.stats import TESTS
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.options import user_settings
from dmlsearch.trainables.errors import UserError

__all__ = ["DEFAULT_COMPARE_SEEDS", "DEFAULT_COMPARE_TRIALS", "CompareOptions"]

DEFAULT_COMPARE_TRIALS = 8  # per method: its budget is this many trials' worth of epochs
DEFAULT_COMPARE_SEEDS = 3  # retrain seeds per method: the fewest that give a useful interval


@dataclasses.dataclass(frozen=True)
class CompareOptions:
    methods: tuple[str, ...] = ()  # loss names
    spaces: tuple[str, ...] = ()  # space files (or shipped space names), one method each
    dataset: str | None = None
    data_root: str | None = None
    protocol: str | None = None
    trials: int = DEFAULT_COMPARE_TRIALS  # per method: the budget is trials × epochs per trial
    budget_s: float | None = None  # instead: device-seconds per method (--budget, GPU-hours)
    seeds: int = DEFAULT_COMPARE_SEEDS
    concurrency: int = 2
    out: Path | None = None
    seed: int = 0
    sets: tuple[tuple[str, Any], ...] = ()
    mlflow_uri: str | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None
    sampler: str = "tpe"
    scheduler: str = "asha"
    grace_period: int | None = None
    reduction_factor: int = 3
    max_failures: int = 2
    storage: str | None = None
    register: bool = False  # each method's retrained model into the Model Registry
    test: str = "t"  # the paired test: "t" (paired t-test) or "permutation" (sign flips)

    def given(self) -> dict[str, Any]:
        """The settings the user gave for every method (CLI beats defaults and space files)."""
        return user_settings(self)

    def search_options(self, space: str) -> SearchOptions:
        """One method's search, as ``dmlsearch run`` would take it (the comparison sets its
        budget and runs it beside the others)."""
        return SearchOptions(
            space=space, dataset=self.dataset, data_root=self.data_root, protocol=self.protocol,
            trials=self.trials, concurrency=self.concurrency, seed=self.seed, sets=self.sets,
            mlflow_uri=self.mlflow_uri, cpus_per_trial=self.cpus_per_trial,
            gpus_per_trial=self.gpus_per_trial, grace_period=self.grace_period,
            reduction_factor=self.reduction_factor, sampler=self.sampler,
            scheduler=self.scheduler, max_failures=self.max_failures, storage=self.storage,
            retrain=True, retrain_top=1, seeds=self.seeds, register=self.register)

    def check(self) -> None:
        if self.trials < 1:
            raise UserError(f"--trials must be >= 1 (trials per method), got {self.trials}")
        if self.test not in TESTS:
            raise UserError(f"--test must be one of {', '.join(TESTS)}, got {self.test!r}")
        if self.seeds < 2:
            raise UserError(
                f"--seeds must be >= 2 for a comparison, got {self.seeds}: each method's best "
                "configuration is retrained with S seeds, and intervals and paired tests need "
                "at least two")
        if self.budget_s is not None and self.budget_s <= 0:
            raise UserError(f"--budget must be > 0, got {self.budget_s:g} s")
        if self.sampler == "grid":
            raise UserError("--sampler grid trains a space's whole grid, which differs by method "
                            "and cannot be given equal budgets; use tpe or random")
        self.search_options("quickstart").check()  # the options a search shares

    def to_json(self) -> dict[str, Any]:
        body = dataclasses.asdict(self)
        body["out"] = str(self.out) if self.out else None
        body["methods"], body["sets"] = list(self.methods), {k: v for k, v in self.sets}
        body["spaces"] = [str(Path(s).resolve()) if Path(s).is_file() else s
                          for s in self.spaces]  # found again from anywhere by resume
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any], *, out: Path) -> CompareOptions:
        fields = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in body.items() if k in fields}
        known.update(out=out, methods=tuple(body.get("methods") or ()),
                     spaces=tuple(body.get("spaces") or ()),
                     sets=tuple((k, v) for k, v in (body.get("sets") or {}).items()))
        return cls(**known)
