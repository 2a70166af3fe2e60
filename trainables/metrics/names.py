"""Metric names a trial can optimise, and their direction. Imports nothing heavy (no torch, no
faiss): the driver, the CLI and the reports use it to rank trials.

- retrieval, higher is better: ``recall@<k>``, ``precision@1``, ``r_precision``, ``map@r``;
- verification (Monteiro et al. 2020): ``eer_<scoring>``, ``mindcf01_<scoring>`` and
  ``mindcf05_<scoring>`` (the normalised minimum detection cost at p_target 0.01 / 0.05, as
  speaker verification reports it; lower is better) and ``auc_<scoring>`` (higher is better) for
  scoring ``cosine``, ``e2e`` (the learned distance D) or ``fusion``; plain ``eer``, ``auc``,
  ``mindcf01``, ``mindcf05`` use the trial's default scoring (``e2e`` when the loss has a
  distance model, else ``cosine``). ``e2e`` and ``fusion`` need the ``e2e`` loss.
"""

from __future__ import annotations

from collections.abc import Sequence

from dmlsearch.trainables.errors import UserError

__all__ = [
    "DEFAULT_KS", "NEED_SCORER", "SCALAR_METRICS", "SCORINGS", "VERIFICATION_METRICS",
    "is_verification_metric", "ks_for_metric", "metric_mode",
]

DEFAULT_KS: tuple[int, ...] = (1, 2, 4, 8)
SCALAR_METRICS: tuple[str, ...] = ("precision@1", "r_precision", "map@r")
SCORINGS: tuple[str, ...] = ("cosine", "e2e", "fusion")
"""How a verification trial (a pair) is scored: see :mod:`dmlsearch.trainables.metrics.verification`."""
VERIFICATION_KINDS: tuple[str, ...] = ("eer", "auc", "mindcf01", "mindcf05")
VERIFICATION_METRICS: tuple[str, ...] = VERIFICATION_KINDS + tuple(
    f"{kind}_{scoring}" for kind in VERIFICATION_KINDS for scoring in SCORINGS)
"""Verification metric names; ``eer*`` and ``mindcf*`` are minimised, ``auc*`` maximised."""
NEED_SCORER: tuple[str, ...] = tuple(
    m for m in VERIFICATION_METRICS if m.endswith(("_e2e", "_fusion")))
"""Metrics that score pairs with a learned distance (the ``e2e`` loss)."""


def ks_for_metric(metric: str, ks: Sequence[int] = DEFAULT_KS) -> tuple[int, ...]:
    """The recall cut-offs to compute so that ``metric`` is among the results; an unknown
    metric is a :class:`UserError` that lists the valid ones."""
    if metric in SCALAR_METRICS or metric in VERIFICATION_METRICS:
        return tuple(ks)
    if metric.startswith("recall@"):
        try:
            k = int(metric.split("@", 1)[1])
        except ValueError:
            k = 0
        if k >= 1:
            return tuple(sorted(set(ks) | {k}))
    raise UserError(
        f"metric must be recall@<k>, {', '.join(SCALAR_METRICS + VERIFICATION_METRICS)}; "
        f"got {metric!r} (fix `metric` in the space file or --set metric=recall@1)"
    )


def is_verification_metric(metric: str) -> bool:
    return metric in VERIFICATION_METRICS


def metric_mode(metric: str) -> str:
    """``"min"`` when lower is better (``eer*``, ``mindcf*``), else ``"max"``; unknown names:
    UserError."""
    ks_for_metric(metric)  # validates the name
    return "min" if metric.startswith(("eer", "mindcf")) else "max"
