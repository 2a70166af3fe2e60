"""Final training of a chosen configuration, shared by the search's retrain and ``train``.

Both paths call :func:`trainables.final.train_final` on the same flat config, so an exported
configuration reproduces the retrain's test metrics (same seed, same machine → same numbers).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from search.tracking import Tracker
from trainables.config import TrialConfig

__all__ = ["FinalOutcome", "train_and_log"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FinalOutcome:
    config: dict[str, Any]
    test_metrics: dict[str, float]
    seconds: float
    run_id: str | None


def train_and_log(
    flat: Mapping[str, Any], *, tracker: Tracker | None, run_name: str,
    tags: Mapping[str, str] | None = None,
) -> FinalOutcome:
    from trainables.final import train_final  # torch: only when training

    cfg = TrialConfig.from_flat(flat)
    log.info("final training: %d epochs on all training classes of %s", cfg.epochs, cfg.dataset)
    result = train_final(cfg)
    config = cfg.to_flat()
    run_id = None
    if tracker is not None:
        run_id = tracker.log_final(name=run_name, config=config, test_metrics=result.test_metrics,
                                   history=result.history, tags=dict(tags or {}))
    return FinalOutcome(config=config, test_metrics=dict(result.test_metrics),
                        seconds=result.seconds, run_id=run_id)
