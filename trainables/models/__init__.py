"""Backbones and the embedding head."""

from __future__ import annotations

from trainables.models._backbones import BACKBONES
from trainables.models._backbones import BackboneInfo
from trainables.models._backbones import SmallCNN
from trainables.models._backbones import register_backbone
from trainables.models._embedding import EmbeddingNet
from trainables.models._embedding import build_model

__all__ = [
    "BACKBONES",
    "BackboneInfo",
    "EmbeddingNet",
    "SmallCNN",
    "build_model",
    "register_backbone",
]
