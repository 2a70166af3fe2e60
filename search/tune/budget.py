"""What a search has spent, counted from its trials' results: epochs (training iterations over
all trials, folds and repeats) and device-seconds (a trial's training time × the GPUs it holds;
a trial without a GPU counts its time once). Plain data: the searcher and the comparison's
scheduler each keep one, and Ray pickles both with the experiment's state."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["Limit", "Usage"]


class Usage:
    """Epochs and device-seconds spent. A result is counted by how far it moved its trial
    (``training_iteration``, ``time_total_s``), so a result Ray hands over twice (the last one
    of a trial, again with ``done``) counts once."""

    def __init__(self, devices_per_trial: float = 1.0) -> None:
        self.devices = devices_per_trial if devices_per_trial > 0 else 1.0
        self.epochs = 0
        self.device_seconds = 0.0
        self._last: dict[str, tuple[int, float]] = {}  # trial -> (iteration, time_total_s)

    def add(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        """Count ``result``; False when it was counted already (or carries no iteration)."""
        iteration = result.get("training_iteration")
        if not isinstance(iteration, (int, float)):
            return False
        total = result.get("time_total_s")
        total = float(total) if isinstance(total, (int, float)) else 0.0
        last_iteration, last_total = self._last.get(trial_id, (0, 0.0))
        if int(iteration) <= last_iteration:
            return False
        self.epochs += int(iteration) - last_iteration
        self.device_seconds += max(0.0, total - last_total) * self.devices
        self._last[trial_id] = (int(iteration), total)
        return True


@dataclasses.dataclass(frozen=True)
class Limit:
    """A budget: at most ``epochs`` epochs, at most ``device_seconds`` (either may be None)."""

    epochs: int | None = None
    device_seconds: float | None = None

    def spent(self, usage: Usage) -> bool:
        return self.fraction(usage) >= 1.0

    def fraction(self, usage: Usage) -> float:
        """How much of the budget is spent (0 with no limit; the larger of the two)."""
        parts = [0.0]
        if self.epochs is not None:
            parts.append(usage.epochs / max(1, self.epochs))
        if self.device_seconds is not None:
            parts.append(usage.device_seconds / max(1e-9, self.device_seconds))
        return max(parts)
