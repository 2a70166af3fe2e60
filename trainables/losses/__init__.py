"""Metric-learning losses by name. One loss per module; each registers itself on import."""

from __future__ import annotations

from dmlsearch.trainables.losses import arcface as _arcface  # noqa: F401  (registers)
from dmlsearch.trainables.losses import contrastive as _contrastive  # noqa: F401  (registers)
from dmlsearch.trainables.losses import cosface as _cosface  # noqa: F401  (registers)
from dmlsearch.trainables.losses import curricular_face as _curricular_face  # noqa: F401  (registers)
from dmlsearch.trainables.losses import e2e as _e2e  # noqa: F401  (registers)
from dmlsearch.trainables.losses import lifted_structure as _lifted_structure  # noqa: F401  (registers)
from dmlsearch.trainables.losses import margin as _margin  # noqa: F401  (registers)
from dmlsearch.trainables.losses import multi_similarity as _multi_similarity  # noqa: F401  (registers)
from dmlsearch.trainables.losses import norm_softmax as _norm_softmax  # noqa: F401  (registers)
from dmlsearch.trainables.losses import npair as _npair  # noqa: F401  (registers)
from dmlsearch.trainables.losses import pml as _pml  # noqa: F401  (registers the pml: families)
from dmlsearch.trainables.losses import proxy_anchor as _proxy_anchor  # noqa: F401  (registers)
from dmlsearch.trainables.losses import proxy_nca as _proxy_nca  # noqa: F401  (registers)
from dmlsearch.trainables.losses import soft_triple as _soft_triple  # noqa: F401  (registers)
from dmlsearch.trainables.losses import thesis_proxy as _thesis_proxy  # noqa: F401  (registers)
from dmlsearch.trainables.losses import triplet as _triplet  # noqa: F401  (registers)
from dmlsearch.trainables.losses._base import LOSSES
from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import LossInfo
from dmlsearch.trainables.losses._base import build_loss
from dmlsearch.trainables.losses._base import register_loss
from dmlsearch.trainables.losses._base import resolve_loss_params
from dmlsearch.trainables.losses._miners import MINERS
from dmlsearch.trainables.losses._miners import MinerInfo
from dmlsearch.trainables.losses._miners import register_miner
from dmlsearch.trainables.losses._miners import resolve_miner_params

__all__ = [
    "LOSSES",
    "LossBundle",
    "LossInfo",
    "MINERS",
    "MinerInfo",
    "build_loss",
    "register_loss",
    "register_miner",
    "resolve_loss_params",
    "resolve_miner_params",
]
