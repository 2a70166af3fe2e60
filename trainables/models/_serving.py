"""The model a registry serves: raw uint8 images in, L2-normalised embeddings out.

Training feeds a backbone its own float convention (``InputTransform``); a user of the registered
model should not have to know it. :class:`RawImageEmbedder` takes the images as the evaluation
transform leaves them (uint8 ``[B, C, H, W]``, resized and centre-cropped to the trial's
``image_size``) and applies the backbone's transform itself.
"""

from __future__ import annotations

import torch
from torch import nn

from dmlsearch.trainables.models._embedding import EmbeddingNet
from dmlsearch.trainables.models._embedding import prepare_input

__all__ = ["RawImageEmbedder"]


class RawImageEmbedder(nn.Module):
    """``net`` behind its input transform: uint8 (or 0–255 float) images → embeddings."""

    def __init__(self, net: EmbeddingNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        device = next(self.net.parameters()).device
        return self.net(prepare_input(self.net, images, device))
