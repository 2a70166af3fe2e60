"""Ray Tune's trial events reach the search's TrialEvents: a real (local) Ray Tune run of a
plain function trainable, with the callback the searches use."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from dmlsearch.search.tune.callbacks import ForwardEvents
from dmlsearch.search.tune.callbacks import set_events
from tests.helpers import Heard


def _trainable(config: dict[str, Any]) -> None:
    from ray import tune

    for epoch in range(1, 4):
        if config["fail"] and epoch == 2:
            raise RuntimeError("the loss became nan")
        tune.report({"score": epoch * config["lr"], "trial_finished": int(epoch == 3)})


@pytest.mark.slow
def test_a_real_tune_run_reports_starts_results_and_endings(tmp_path: Path,
                                                            local_ray: Path) -> None:
    from ray import tune

    heard = Heard()
    set_events(heard)
    tuner = tune.Tuner(
        _trainable,
        param_space={"lr": tune.grid_search([0.1, 0.2]), "fail": tune.grid_search([False,
                                                                                   True])},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(dir=tmp_path),
                                  callbacks=[ForwardEvents()], verbose=0))
    tuner.fit()
    assert len(heard.started) == 4
    assert all(set(c) == {"lr", "fail"} for c in heard.started.values())
    for trial_id, config in heard.started.items():
        state, reason = heard.finished[trial_id]
        if config["fail"]:
            assert state == "failed" and "the loss became nan" in reason
            assert heard.results[trial_id] == [pytest.approx(config["lr"])]
        else:
            assert (state, reason) == ("completed", None)
            assert heard.results[trial_id] == pytest.approx([config["lr"] * e for e in (1, 2, 3)])
