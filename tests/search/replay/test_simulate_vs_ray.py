"""The simulated clock against the real thing: one trial at a time (where a Ray replay does not
depend on timing), a replayed search through Ray Tune and the same search on the simulated clock
propose the same trials, and their scheduler stops each after the same epochs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmlsearch.search.replay.simulate import simulate_search
from dmlsearch.search.results import TrialState
from dmlsearch.search.tune import create_storage
from dmlsearch.search.tune import init_ray
from dmlsearch.search.tune import ray_running
from dmlsearch.search.tune import run_tune
from dmlsearch.search.tune import shutdown_ray
from dmlsearch.spaces import load_space
from tests.search.replay._sim_helpers import settings
from tests.search.replay._sim_helpers import shaped_curves
from tests.search.replay._sim_helpers import space_file
from tests.search.replay._sim_helpers import write_table

pytestmark = pytest.mark.slow  # it starts Ray

EPOCHS = 6


class _Quiet:
    def trial_started(self, trial_id: str, config: dict[str, Any]) -> None:
        pass

    def trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        pass

    def trial_finished(self, trial_id: str, state: str, reason: str | None) -> None:
        pass


@pytest.fixture(scope="module")
def _ray() -> Iterator[None]:
    """One local Ray for the module (left running if it was running before)."""
    running = ray_running()
    init_ray(num_cpus=1, num_gpus=0)
    yield
    if not running:
        shutdown_ray()


@pytest.mark.parametrize("scheduler", ["asha", "median"])
def test_one_at_a_time_the_simulation_stops_what_ray_stops(tmp_path: Path, scheduler: str,
                                                           _ray: None) -> None:
    table = write_table(tmp_path / "t.jsonl", shaped_curves(EPOCHS))
    space = load_space(str(space_file(tmp_path, EPOCHS)))
    options = {"epochs": EPOCHS, "concurrency": 1, "scheduler": scheduler, "seed": 7,
               "budget_epochs": 8 * EPOCHS}
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    create_storage(url)
    real = dataclasses.replace(settings(table, tmp_path, **options),  # type: ignore[arg-type]
                               optuna_storage=url)
    records = run_tune(real, define_by_run=space.define_by_run, warm_starts=[], events=_Quiet())
    simulated = simulate_search(settings(table, tmp_path, **options),  # type: ignore[arg-type]
                                define_by_run=space.define_by_run, warm_starts=[])
    # the learning rate (continuous, drawn by the same seeded sampler) names each trial
    by_ray = {r.config["lr"]: (r.config["loss"], r.iterations, r.state) for r in records}
    by_clock = {t.config["lr"]: (t.config["loss"], t.epochs, t.state) for t in simulated.trials}
    assert by_clock == by_ray
    assert any(state is TrialState.PRUNED for _, _, state in by_ray.values())
