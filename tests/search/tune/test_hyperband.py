"""Synchronous HyperBand: a trial that fails after its bracket's first halving does not leave the
trials paused at the next milestone waiting for it (a real local Ray Tune run; with Ray's own
``HyperBandScheduler`` this search hangs with nothing running, and the watchdog ends it)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from dmlsearch.search.tune.ray_runtime import init_ray
from dmlsearch.search.tune.ray_runtime import shutdown_ray
from dmlsearch.search.tune.schedulers import SCHEDULERS
from dmlsearch.search.tune.settings import TuneSettings

MAX_T = 4
FAILS = 5  # the trial with x = 5 fails in its 3rd epoch, after its bracket's first halving
WAIT = 15.0  # seconds: time for 6 to resume and reach its 4th epoch before 5 fails


def _trainable(config: dict[str, Any]) -> None:
    from ray import tune

    folders = Path(config["folders"])
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:  # a paused trial resumes where it was
        with checkpoint.as_directory() as saved:
            start = json.loads((Path(saved) / "state.json").read_text())["epoch"]
    for epoch in range(start + 1, MAX_T + 1):
        if config["x"] == FAILS and epoch == 3:
            time.sleep(WAIT)  # 6 reaches epoch 4 and pauses, waiting for 5 ...
            raise RuntimeError("the loss became nan")  # ... which fails
        folder = Path(tempfile.mkdtemp(dir=folders))
        (folder / "state.json").write_text(json.dumps({"epoch": epoch}))
        tune.report({"score": config["x"] + epoch / 100},
                    checkpoint=tune.Checkpoint.from_directory(str(folder)))


@pytest.mark.slow
def test_a_trial_failing_mid_bracket_leaves_no_trial_paused_for_ever(tmp_path: Path) -> None:
    from ray import tune
    from ray.tune import Callback
    from ray.tune.stopper import Stopper

    ended: dict[int, str] = {}
    iterations: dict[int, int] = {}
    hung = tmp_path / "hung"
    deadline = time.time() + 150

    class Statuses(Callback):
        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            ended.update({t.config["x"]: t.status for t in trials})
            iterations.update({t.config["x"]: t.last_result.get("training_iteration")
                               for t in trials})

    class Watchdog(Stopper):
        """Ends a search that hangs (about 20 s of work here), and says so."""

        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            return False

        def stop_all(self) -> bool:
            if time.time() > deadline:
                hung.touch()
            return hung.exists()

    settings = TuneSettings(storage_path=tmp_path, experiment=tmp_path / "x", num_samples=6,
                            concurrency=6, max_iterations=MAX_T, grace_period=1,
                            reduction_factor=2, cpus_per_trial=1, gpus_per_trial=0, seed=0,
                            optuna_storage="unused", study_name="unused", scheduler="hyperband")
    scheduler = SCHEDULERS.get("hyperband").make(settings)
    (tmp_path / "checkpoints").mkdir()
    init_ray(num_cpus=2, num_gpus=0)
    try:
        # All 6 trials start at once and join brackets in order (max_t 4, reduction factor 2):
        # x = 1, 2, 3 fill the bracket that never halves; x = 6, 5, 4 the next one, halved to
        # 6 and 5 at epoch 2; 6 pauses at epoch 4 until the rest of its bracket gets there, and
        # 5 fails in its 3rd epoch.
        tuner = tune.Tuner(
            tune.with_resources(_trainable, {"cpu": 0.25}),
            param_space={"x": tune.grid_search([1, 2, 3, 6, FAILS, 4]),
                         "folders": str(tmp_path / "checkpoints")},
            tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=scheduler,
                                        max_concurrent_trials=6),
            run_config=tune.RunConfig(storage_path=str(tmp_path / "ray"), verbose=0,
                                      callbacks=[Statuses()], stop=Watchdog()))
        tuner.fit()
    finally:
        shutdown_ray()
    assert not hung.exists(), f"the search hung with nothing running: {ended}"
    assert ended[FAILS] == "ERROR"
    assert {x: s for x, s in ended.items() if x != FAILS} == {
        x: "TERMINATED" for x in (1, 2, 3, 4, 6)}, ended
    assert iterations == {1: 4, 2: 4, 3: 4, 6: 4, FAILS: 2, 4: 2}, iterations
