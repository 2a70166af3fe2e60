"""The options of ``dmlsearch run``, typed, and how they turn into a space with overrides."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from trainables.errors import UserError

__all__ = ["SearchOptions", "parse_sets", "default_out"]


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    space: str = "quickstart"
    dataset: str | None = None
    data_root: str | None = None
    protocol: str | None = None
    trials: int = 10
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

    def overrides(self) -> dict[str, Any]:
        """Settings that replace the space's base or searched values (CLI beats space file)."""
        out: dict[str, Any] = {"seed": self.seed}
        for key, value in (("dataset", self.dataset), ("data_root", self.data_root),
                           ("protocol", self.protocol)):
            if value is not None:
                out[key] = value
        out.update(dict(self.sets))
        return out

    def check(self) -> None:
        if self.trials < 1:
            raise UserError(f"--trials must be >= 1, got {self.trials}")
        if self.concurrency < 1:
            raise UserError(f"--concurrency must be >= 1, got {self.concurrency}")
        if self.cpus_per_trial <= 0:
            raise UserError(f"--cpus-per-trial must be > 0, got {self.cpus_per_trial}")
        if self.gpus_per_trial is not None and self.gpus_per_trial < 0:
            raise UserError(f"--gpus-per-trial must be >= 0, got {self.gpus_per_trial}")
        if self.reduction_factor < 2:
            raise UserError(f"--reduction-factor must be >= 2, got {self.reduction_factor}")


def parse_sets(items: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    """``["epochs=3", "loss=proxy_anchor"]`` → typed pairs (values parsed as YAML scalars)."""
    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects KEY=VALUE (e.g. --set epochs=3), got {item!r}")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        if isinstance(value, (dict, list)):
            raise UserError(f"--set {key} takes a single value, got {raw!r}")
        pairs.append((key.strip(), value))
    return tuple(pairs)


def default_out(space: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path.cwd() / f"dmlsearch-{Path(space).stem}-{stamp}"
