"""What a search has spent: epochs and device-seconds, each result counted once."""

from __future__ import annotations

from typing import Any

from dmlsearch.search.tune.budget import Limit
from dmlsearch.search.tune.budget import Usage


def _result(iteration: int, *, seconds: float = 1.0) -> dict[str, Any]:
    return {"score": 0.1 * iteration, "training_iteration": iteration,
            "time_total_s": seconds * iteration}


def test_usage_counts_each_epoch_once_and_device_time() -> None:
    usage = Usage(devices_per_trial=0.5)
    assert usage.add("a", _result(1)) and usage.add("a", _result(2))
    assert not usage.add("a", {**_result(2), "done": True})  # Ray's repeat of the last result
    assert usage.add("b", _result(1, seconds=4.0))
    assert usage.epochs == 3
    assert usage.device_seconds == (2.0 + 4.0) * 0.5
    assert Usage(0.0).devices == 1.0  # a trial without a GPU counts its time once
    assert Limit(epochs=4).fraction(usage) == 0.75 and not Limit(epochs=4).spent(usage)
    assert Limit(epochs=3).spent(usage) and Limit(device_seconds=3.0).spent(usage)
    assert Limit().fraction(usage) == 0.0
