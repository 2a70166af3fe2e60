"""Backbone + pooling + linear embedding + L2 normalisation (SPEC §4 head options)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainables.models._backbones import BACKBONES

__all__ = ["EmbeddingNet", "build_model"]


class EmbeddingNet(nn.Module):
    """trunk → GAP / GMP / GAP+GMP (summed, as Proxy-Anchor's code) → Linear → L2-normalise."""

    def __init__(
        self, *, trunk: nn.Module, features: int, embedding_size: int, pooling: str = "gap"
    ) -> None:
        super().__init__()
        self.trunk = trunk
        self.pooling = pooling
        self.embedding = nn.Linear(features, embedding_size)
        nn.init.kaiming_normal_(self.embedding.weight, mode="fan_out")
        nn.init.zeros_(self.embedding.bias)

    def pool(self, fmap: torch.Tensor) -> torch.Tensor:
        if self.pooling == "gap":
            return fmap.mean(dim=(2, 3))
        if self.pooling == "gmp":
            return fmap.amax(dim=(2, 3))
        return fmap.mean(dim=(2, 3)) + fmap.amax(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.embedding(self.pool(self.trunk(x))), dim=1)

    def freeze_batchnorm(self) -> None:
        """Eval-mode BN with frozen affine parameters (MultiSimilarity's reference code)."""
        for m in self.trunk.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()
                for p in m.parameters():
                    p.requires_grad_(False)


def build_model(
    *, backbone: str, in_channels: int, embedding_size: int, pooling: str
) -> EmbeddingNet:
    trunk, features = BACKBONES.get(backbone).build(in_channels=in_channels)
    return EmbeddingNet(
        trunk=trunk, features=features, embedding_size=embedding_size, pooling=pooling
    )
