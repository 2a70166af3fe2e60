"""Final training: the chosen configuration on *all* training classes, then one test evaluation.

SPEC §3: after the search, the configuration is retrained on every training class (no
validation split, so no model selection happens here) for a fixed number of epochs, and the
test classes are touched exactly once. ``dmlsearch train`` and the search's retrain both call
:func:`train_final`, so an exported configuration reproduces the retrain's numbers.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from trainables.config import TrialConfig
from trainables.data import Dataset
from trainables.evaluate import evaluate
from trainables.evaluate import ks_for_metric
from trainables.fit import EpochReport
from trainables.fit import Fitter
from trainables.models import EmbeddingNet
from trainables.trial import load_for

__all__ = ["FinalResult", "train_final"]


@dataclasses.dataclass
class FinalResult:
    model: EmbeddingNet
    test_metrics: dict[str, float]
    history: list[dict[str, float]]
    seconds: float


def train_final(
    cfg: TrialConfig,
    *,
    dataset: Dataset | None = None,
    on_epoch: Callable[[EpochReport], None] | None = None,
) -> FinalResult:
    started = time.perf_counter()
    dataset = load_for(cfg) if dataset is None else dataset
    fitter = Fitter(cfg, dataset.train(), None)
    result = fitter.run(None if on_epoch is None else (lambda ep, _state: on_epoch(ep)))
    test = evaluate(result.model, dataset.test(), device=fitter.device,
                    ks=ks_for_metric(cfg.metric), workers=cfg.workers)
    return FinalResult(model=result.model, test_metrics=test, history=result.history,
                       seconds=time.perf_counter() - started)
