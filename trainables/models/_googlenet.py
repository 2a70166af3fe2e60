"""GoogLeNet (Inception v1) trunk: torchvision's architecture, ``weights=None``, no aux logits.

Module names are torchvision's (``conv1`` ... ``inception5b``), so its ImageNet state_dict loads by
key (its ``aux1`` / ``aux2`` / ``fc`` entries are ignored). Those weights were ported from
TensorFlow and expect inputs in [-1, 1]; torchvision turns them on with ``transform_input=True``,
which maps ImageNet-normalised input back to that range. The trunk always does the same, so its
input is ImageNet mean / std like ResNet's whatever the weights (for random weights it is a fixed
per-channel affine map, harmless).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dmlsearch.trainables.models._backbones import register_backbone
from dmlsearch.trainables.models._backbones import rgb_in_channels
from dmlsearch.trainables.models._normalize import IMAGENET
from dmlsearch.trainables.models._normalize import as_rgb
from dmlsearch.trainables.models._weights import ImagenetWeights

__all__ = ["GoogLeNetTrunk"]

# torchvision's GoogLeNet_Weights.IMAGENET1K_V1.url (tests/trainables/test_models.py compares):
# written out so that registering the backbone does not import torchvision, which takes seconds
# in every process that builds another model (each trial's)
IMAGENET1K_V1 = "https://download.pytorch.org/models/googlenet-1378be20.pth"

_STAGES = (
    "conv1", "maxpool1", "conv2", "conv3", "maxpool2", "inception3a", "inception3b", "maxpool3",
    "inception4a", "inception4b", "inception4c", "inception4d", "inception4e", "maxpool4",
    "inception5a", "inception5b",
)


class GoogLeNetTrunk(nn.Module):
    """torchvision GoogLeNet up to ``inception5b``: [B, 3, H, W] → [B, 1024, H/32, W/32]."""

    out_channels = 1024

    def __init__(self, net: Any) -> None:  # a torchvision GoogLeNet
        super().__init__()
        for name in _STAGES:
            self.add_module(name, getattr(net, name))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _transform_input(as_rgb(x))
        for name in _STAGES:
            x = getattr(self, name)(x)
        return x


def _transform_input(x: torch.Tensor) -> torch.Tensor:
    """torchvision's ``GoogLeNet._transform_input``: ImageNet-normalised → (x/255 - 0.5) / 0.5."""
    mean, std = IMAGENET.mean, IMAGENET.std
    scale = torch.tensor([s / 0.5 for s in std], dtype=x.dtype, device=x.device)
    shift = torch.tensor([(m - 0.5) / 0.5 for m in mean], dtype=x.dtype, device=x.device)
    return x * scale.view(1, 3, 1, 1) + shift.view(1, 3, 1, 1)


@register_backbone(
    "googlenet",
    description="GoogLeNet / Inception v1 (torchvision, no aux heads), 1024 feature channels",
    input=IMAGENET,
    imagenet=ImagenetWeights(url=IMAGENET1K_V1),
)
def _googlenet(*, in_channels: int) -> tuple[nn.Module, int]:
    import torchvision.models as tvm

    rgb_in_channels("googlenet", in_channels)
    net = tvm.googlenet(weights=None, aux_logits=False, transform_input=True, init_weights=True)
    return GoogLeNetTrunk(net), GoogLeNetTrunk.out_channels
