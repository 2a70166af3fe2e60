"""TuneSettings for the tune tests: small, valid, overridable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmlsearch.search.tune import TuneSettings


def tune_settings(**changes: Any) -> TuneSettings:
    base: dict[str, Any] = dict(
        storage_path=Path("."), experiment=Path("./tune"), num_samples=1, concurrency=1,
        max_iterations=8, grace_period=1, reduction_factor=2, cpus_per_trial=1,
        gpus_per_trial=0, seed=0, optuna_storage="sqlite://", study_name="s")
    return TuneSettings(**{**base, **changes})
