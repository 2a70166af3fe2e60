"""Backbone + pooling + linear embedding + L2 normalisation (head options: Psomas 2020 §3.5.1).

Image trunks give [B, C, H, W] and audio trunks [B, C, T]; pooling takes every axis after C.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dmlsearch.trainables.input_kinds import input_kind
from dmlsearch.trainables.models._backbones import BACKBONES
from dmlsearch.trainables.models._normalize import SYMMETRIC
from dmlsearch.trainables.models._normalize import InputTransform
from dmlsearch.trainables.models._tdnn import Utterances
from dmlsearch.trainables.models._weights import load_weights
from dmlsearch.trainables.models._weights import resolve_pretrained

__all__ = ["EmbeddingNet", "build_model", "prepare_input"]


class EmbeddingNet(nn.Module):
    """trunk → GAP / GMP / GAP+GMP (summed, as Proxy-Anchor's code) → Linear → L2-normalise.

    ``input_transform`` (not a module, not in the state_dict) maps uint8 images on the device to
    what the trunk expects; :func:`build_model` sets the backbone's own.
    """

    def __init__(
        self,
        *,
        trunk: nn.Module,
        features: int,
        embedding_size: int,
        pooling: str = "gap",
        input_transform: Callable[[Any], Any] = InputTransform(SYMMETRIC),
    ) -> None:
        super().__init__()
        self.trunk = trunk
        self.input_transform = input_transform
        self.pooling = pooling
        self.embedding = nn.Linear(features, embedding_size)
        nn.init.kaiming_normal_(self.embedding.weight, mode="fan_out")
        nn.init.zeros_(self.embedding.bias)

    def pool(self, fmap: torch.Tensor) -> torch.Tensor:
        """Pool every axis after the channels: [B, C, H, W] (images) or [B, C, T] (audio)."""
        dims = tuple(range(2, fmap.ndim))
        if self.pooling == "gap":
            return fmap.mean(dim=dims)
        if self.pooling == "gmp":
            return fmap.amax(dim=dims)
        return fmap.mean(dim=dims) + fmap.amax(dim=dims)

    def forward(self, x: torch.Tensor | Utterances) -> torch.Tensor:
        return F.normalize(self.embedding(self.pool(self.trunk(x))), dim=1)


def build_model(
    *,
    backbone: str,
    in_channels: int,
    embedding_size: int,
    pooling: str,
    pretrained: str = "none",
) -> EmbeddingNet:
    """The embedding network for ``backbone``; ``pretrained``: none, imagenet or a weights file.

    Only the trunk is pretrained; the embedding layer is always freshly initialised. Trunks with
    ImageNet weights take 3 channels: grey images are repeated to RGB by ``input_transform``.
    """
    info = BACKBONES.get(backbone)
    # Resolve the file first: a missing file fails before a large trunk is built.
    weights = resolve_pretrained(pretrained, backbone=backbone, imagenet=info.imagenet)
    trunk, features = info.build(in_channels=in_channels)
    if weights is not None:
        load_weights(trunk, weights, backbone=backbone,
                     classifier_expected=pretrained == "imagenet")
    return EmbeddingNet(  # the kind's transform: pixels by the backbone's convention, or not
        trunk=trunk, features=features, embedding_size=embedding_size, pooling=pooling,
        input_transform=input_kind(info.input_kind).transform_for(info.input),
    )


def prepare_input(model: nn.Module, images: torch.Tensor | Utterances,
                  device: torch.device) -> torch.Tensor | Utterances:
    """uint8 [B, C, H, W] → ``model``'s float input on ``device`` (its backbone's convention);
    an audio model's features [B, F, T], or whole utterances packed (:class:`Utterances`),
    pass as float32 (:class:`FeatureInput`).

    Models without an ``input_transform`` get the [-1, 1] convention (``smallcnn``'s).
    """
    transform = getattr(model, "input_transform", None)
    if transform is None:
        transform = InputTransform(SYMMETRIC)
    return transform(images.to(device, non_blocking=True))
