"""ResNet-18 / ResNet-50 trunks (torchvision architectures, built with ``weights=None``).

The trunk keeps torchvision's module names (``conv1``, ``bn1``, ``layer1`` ... ``layer4``), so a
torchvision ImageNet state_dict loads by key; ``avgpool`` and ``fc`` are dropped (the embedding
head pools). ``imagenet`` means torchvision's ``IMAGENET1K_V1`` weights, the ones the DML
literature fine-tunes (ResNet-50's ``V2`` recipe is a different, later training).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from dmlsearch.trainables.models._backbones import register_backbone
from dmlsearch.trainables.models._backbones import rgb_in_channels
from dmlsearch.trainables.models._normalize import IMAGENET
from dmlsearch.trainables.models._normalize import as_rgb
from dmlsearch.trainables.models._weights import ImagenetWeights

__all__ = ["ResNetTrunk"]

# torchvision's ResNet{18,50}_Weights.IMAGENET1K_V1.url (tests/trainables/test_models.py compares):
# written out so that registering the backbones does not import torchvision, which takes seconds
# in every process that builds another model (each trial's)
IMAGENET1K_V1 = {"resnet18": "https://download.pytorch.org/models/resnet18-f37072fd.pth",
                 "resnet50": "https://download.pytorch.org/models/resnet50-0676ba61.pth"}
_STAGES = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4")


class ResNetTrunk(nn.Module):
    """A torchvision ResNet up to ``layer4``: [B, 3, H, W] → [B, F, H/32, W/32]."""

    def __init__(self, net: Any) -> None:  # a torchvision ResNet
        super().__init__()
        for name in _STAGES:
            self.add_module(name, getattr(net, name))
        self.out_channels = net.fc.in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = as_rgb(x)
        for name in _STAGES:
            x = getattr(self, name)(x)
        return x


def _builder(name: str) -> Callable[..., tuple[nn.Module, int]]:
    def build(*, in_channels: int) -> tuple[nn.Module, int]:
        import torchvision.models as tvm

        rgb_in_channels(name, in_channels)
        trunk = ResNetTrunk(getattr(tvm, name)(weights=None))
        return trunk, trunk.out_channels

    return build


register_backbone(
    "resnet18",
    description="ResNet-18 (torchvision), 512 feature channels, stride 32",
    input=IMAGENET,
    imagenet=ImagenetWeights(url=IMAGENET1K_V1["resnet18"]),
)(_builder("resnet18"))
register_backbone(
    "resnet50",
    description="ResNet-50 (torchvision), 2048 feature channels, stride 32",
    input=IMAGENET,
    imagenet=ImagenetWeights(url=IMAGENET1K_V1["resnet50"]),
)(_builder("resnet50"))
