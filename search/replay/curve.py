"""One learning curve of a table, trained in a recording's worker process (torch): a
configuration trained exactly as a fixed-protocol trial of a search trains it, with every
epoch's validation metrics and times, and the test metrics of the model a trial stopped at that
epoch would select.

The test classes are scored after every epoch whose validation score is the best so far (the
model the trial keeps), never to choose anything: a table answers "what would a search that
picked this configuration at this epoch get on test" for every configuration and epoch.
"""

from __future__ import annotations

import time
from typing import Any

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import Dataset
from dmlsearch.trainables.errors import TrialFailed
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.metrics.evaluate import evaluate
from dmlsearch.trainables.metrics.names import metric_mode
from dmlsearch.trainables.trial import fold_fitter
from dmlsearch.trainables.trial import splits_for

__all__ = ["CURVE_KEYS", "record_curve"]

CURVE_KEYS = ("map@r", "recall@1", "precision@1", "r_precision", "recall@2", "recall@4",
              "recall@8")
"""The metrics kept per epoch (validation) and per improving epoch (test), besides the
configuration's own ``metric``."""


def record_curve(cfg: TrialConfig, dataset: Dataset) -> dict[str, Any]:
    """Train ``cfg`` (fixed protocol) and return its curve: ``status`` ("ok" or "failed" with
    ``reason``), ``epochs`` (each: ``epoch``, ``train_loss``, ``val``, ``seconds`` and
    ``cpu_seconds`` of training and validation, and ``test`` when the epoch is the best so far),
    ``best_epoch``, ``best_val`` and ``test_at_best``."""
    if cfg.protocol != "fixed":
        raise UserError(f"a learning-curve table is recorded with protocol=fixed (one curve per "
                        f"configuration), got protocol={cfg.protocol!r}; set protocol=fixed")
    (split,) = splits_for(cfg, dataset)
    keys = tuple(dict.fromkeys((cfg.metric, *CURVE_KEYS)))
    test = dataset.test()
    fitter = fold_fitter(cfg, dataset, split)
    epochs: list[dict[str, Any]] = []
    clock = [time.process_time()]
    started = time.perf_counter()

    def on_epoch(report: Any, _state: Any) -> None:
        cpu = time.process_time() - clock[0]
        row: dict[str, Any] = {
            "epoch": report.epoch, "train_loss": report.train_loss,
            "val": {k: float(report.metrics[k]) for k in keys if k in report.metrics},
            "seconds": report.seconds, "cpu_seconds": cpu,
        }
        if report.best_epoch == report.epoch:  # the model a trial stopped here would keep
            scored = evaluate(fitter.model, test, device=fitter.device, ks=fitter.ks)
            row["test"] = {k: float(v) for k, v in scored.items() if k in keys}
        epochs.append(row)
        clock[0] = time.process_time()  # the test's time is not the trial's

    status, reason = "ok", None
    try:
        fitter.run(on_epoch)
    except TrialFailed as exc:
        status, reason = "failed", str(exc)
    sign = -1.0 if metric_mode(cfg.metric) == "min" else 1.0
    best = None
    for row in epochs:  # strictly better only: the first of equal scores, as the fit keeps it
        value = row["val"].get(cfg.metric)
        if value is not None and (best is None or sign * value > sign * best["val"][cfg.metric]):
            best = row
    return {
        "status": status, "reason": reason, "epochs": epochs,
        "best_epoch": None if best is None else best["epoch"],
        "best_val": None if best is None else best["val"],
        "test_at_best": None if best is None else best.get("test"),
        "seconds": time.perf_counter() - started,
    }
