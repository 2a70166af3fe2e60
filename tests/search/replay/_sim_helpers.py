"""Small learning-curve tables of known curves and times, the space that replays them, and the
settings of a simulated search over them (the simulated clock's tests in this folder)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmlsearch.search.replay.table import TABLE_FORMAT
from dmlsearch.search.replay.table import run_line
from dmlsearch.search.tune.settings import TuneSettings

LOSSES = ("multi_similarity", "proxy_anchor", "contrastive")
LRS = (1e-3, 3e-3)

# (loss, lr) -> each epoch's (validation score, seconds)
Curves = Mapping[tuple[str, float], Sequence[tuple[float, float]]]


def space_file(folder: Path, epochs: int, warm_starts: Sequence[Mapping[str, Any]] = ()) -> Path:
    """A space over the table's settings (a continuous learning rate, snapped to the table's)."""
    starts = "".join(f"  - {json.dumps(dict(w))}\n" for w in warm_starts)
    path = folder / "space.yaml"
    path.write_text(
        "name: simulated\n"
        "source: a test table of known curves and times\n"
        f"base: {{dataset: glyphs, backbone: smallcnn, epochs: {epochs}, batch_size: 32,\n"
        "       m_per_class: 4, embedding_size: 16, metric: map@r, val_ratio: 0.2,\n"
        "       lr_schedule: none, device: cpu}\n"
        "params:\n"
        "  - loss: {type: categorical, choices: [multi_similarity, proxy_anchor, contrastive]}\n"
        "  - lr: {type: float, low: 1.0e-3, high: 3.0e-3, log: true}\n"
        + (f"warm_start:\n{starts}" if starts else ""))
    return path


def shaped_curves(epochs: int) -> dict[tuple[str, float], list[tuple[float, float]]]:
    """Six curves that cross (the slow starters end best) with irregular epoch times (no two
    trials' epochs end at the same instant by accident)."""
    curves = {}
    for i, loss in enumerate(LOSSES):
        for j, lr in enumerate(LRS):
            k = 2 * i + j
            start, gain = 0.1 + 0.07 * ((5 * k) % 6), 0.01 + 0.013 * k
            seconds = 1.0 + 0.173 * k
            curves[(loss, lr)] = [(round(start + gain * e, 6), seconds + 0.0371 * (e % 3))
                                  for e in range(1, epochs + 1)]
    return curves


def write_table(path: Path, curves: Curves, *, failed: Sequence[tuple[str, float]] = ()
                ) -> Path:
    """A grid table of ``curves`` (every epoch's test score half its validation score);
    ``failed``: curves whose training failed after their last epoch."""
    epochs = max(len(c) for c in curves.values())
    lines = [{"kind": "header", "format": TABLE_FORMAT, "metric": "map@r",
              "base": {"epochs": epochs}}]
    for (loss, lr), rows in curves.items():
        bad = (loss, lr) in failed
        curve = {"status": "failed" if bad else "ok",
                 "reason": "TrialFailed: loss became nan" if bad else None,
                 "epochs": [{"epoch": e, "train_loss": 1.0 / e, "val": {"map@r": score},
                             "seconds": seconds, "cpu_seconds": seconds,
                             "test": {"map@r": score / 2}}
                            for e, (score, seconds) in enumerate(rows, 1)],
                 "best_epoch": None, "test_at_best": None}
        lines.append(run_line({"loss": loss, "lr": lr}, 0, curve))
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def settings(table: Path, folder: Path, *, epochs: int, concurrency: int, sampler: str = "random",
             scheduler: str = "asha", seed: int = 0, budget_epochs: int | None = None,
             num_samples: int = 1000) -> TuneSettings:
    """A replayed search's settings: ASHA's first rung after a quarter of the epochs, reduction
    factor 3, as the benchmark's."""
    return TuneSettings(
        storage_path=folder / "ray", experiment=folder / "ray" / "sim", num_samples=num_samples,
        concurrency=concurrency, max_iterations=epochs, grace_period=max(1, epochs // 4),
        reduction_factor=3, cpus_per_trial=1, gpus_per_trial=0, seed=seed,
        optuna_storage="sqlite:///:memory:", study_name="sim", mode="max", max_failures=0,
        sampler=sampler, scheduler=scheduler, max_epochs=budget_epochs, replay=str(table),
        replay_speedup=1000.0, verbose=0)
