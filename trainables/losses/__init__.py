"""Metric-learning losses by name. One loss per module; each registers itself on import."""

from __future__ import annotations

from trainables.losses import multi_similarity as _multi_similarity  # noqa: F401  (registers)
from trainables.losses import proxy_anchor as _proxy_anchor  # noqa: F401  (registers)
from trainables.losses._base import LOSSES
from trainables.losses._base import LossBundle
from trainables.losses._base import LossInfo
from trainables.losses._base import build_loss
from trainables.losses._base import register_loss
from trainables.losses._base import resolve_loss_params

__all__ = [
    "LOSSES",
    "LossBundle",
    "LossInfo",
    "build_loss",
    "register_loss",
    "resolve_loss_params",
]
