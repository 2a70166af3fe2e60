"""One learning curve: the configuration trained exactly as a fixed-protocol trial (the same
validation numbers), with the test classes scored only at the epochs a trial would keep."""

from __future__ import annotations

import pytest

from dmlsearch.search.replay.curve import record_curve
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.trial import load_for
from dmlsearch.trainables.trial import run_trial
from tests.helpers import small_config


def test_a_curve_is_a_trials_training_with_the_kept_models_tested() -> None:
    cfg = small_config(epochs=3, metric="map@r", embedding_size=16, device="cpu")
    dataset = load_for(cfg)
    curve = record_curve(cfg, dataset)
    assert curve["status"] == "ok" and [r["epoch"] for r in curve["epochs"]] == [1, 2, 3]
    seen: list[float] = []
    run_trial(cfg, dataset=dataset, on_progress=lambda p, _s: seen.append(p.metrics["map@r"]))
    assert [r["val"]["map@r"] for r in curve["epochs"]] == pytest.approx(seen, abs=1e-6)
    best = max(curve["epochs"], key=lambda r: r["val"]["map@r"])
    assert curve["best_epoch"] == best["epoch"] and curve["test_at_best"] == best["test"]
    assert all(0.0 <= v <= 1.0 for v in curve["test_at_best"].values())
    assert all(r["seconds"] > 0 and r["cpu_seconds"] > 0 for r in curve["epochs"])


def test_a_diverging_configuration_is_recorded_as_failed() -> None:
    cfg = small_config(epochs=2, lr=1e9, embedding_size=16, device="cpu", loss="proxy_anchor")
    curve = record_curve(cfg, load_for(cfg))
    assert curve["status"] == "failed" and "loss became" in curve["reason"]


def test_only_a_fixed_split_gives_one_curve() -> None:
    cfg = small_config(protocol="kfold", folds=2)
    with pytest.raises(UserError, match="protocol=fixed"):
        record_curve(cfg, load_for(cfg))
