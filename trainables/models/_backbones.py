"""Backbones by name: each returns a trunk producing a feature map and its channel count.

Each entry also says how its pixels are prepared (:class:`InputSpec`) and, for backbones with
published ImageNet weights, where they come from (:class:`ImagenetWeights`; never downloaded).
The torchvision and BN-Inception entries live in ``_resnet``, ``_googlenet`` and ``_bninception``;
the package ``__init__`` imports them, so the registry is complete once ``trainables.models`` is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from torch import nn

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.input_kinds import INPUT_KINDS
from dmlsearch.trainables.models._normalize import SYMMETRIC
from dmlsearch.trainables.models._normalize import InputSpec
from dmlsearch.trainables.models._normalize import InputTransform
from dmlsearch.trainables.models._weights import ImagenetWeights
from dmlsearch.trainables.registry import Registry

__all__ = [
    "BackboneInfo",
    "BACKBONES",
    "input_transform",
    "register_backbone",
    "rgb_in_channels",
    "SmallCNN",
]


@dataclasses.dataclass(frozen=True)
class BackboneInfo:
    """A registered backbone: ``build(in_channels=) -> (trunk, feature_channels)`` + metadata.

    ``input_kind``: what it takes, a name of :mod:`trainables.input_kinds`: ``image`` (uint8
    pixels ``[B, C, H, W]``, prepared by ``input``) or ``audio`` (float features
    ``[B, n_features, T]``; the trunk's output ``[B, F, T']`` is pooled over time).
    """

    name: str
    build: Callable[..., tuple[nn.Module, int]]
    description: str
    input: InputSpec = SYMMETRIC
    imagenet: ImagenetWeights | None = None
    input_kind: str = "image"


BACKBONES: Registry[BackboneInfo] = Registry("backbone", option="backbone")


def register_backbone(
    name: str,
    *,
    description: str,
    input: InputSpec = SYMMETRIC,  # noqa: A002 - the metadata's name
    imagenet: ImagenetWeights | None = None,
    input_kind: str = "image",
) -> Callable:
    """Register ``build(in_channels=) -> (trunk, feature_channels)`` under ``name``."""
    if input_kind not in INPUT_KINDS:
        raise ValueError(f"backbone {name!r}: input_kind must be one of "
                         f"{', '.join(INPUT_KINDS.names())} (trainables.input_kinds)")
    return BACKBONES.register(
        name,
        lambda fn: BackboneInfo(
            name=name, build=fn, description=description, input=input, imagenet=imagenet,
            input_kind=input_kind,
        ),
    )


def input_transform(backbone: str) -> InputTransform:
    """uint8 [B, C, H, W] (on the device) → the float input ``backbone`` expects (_normalize)."""
    return InputTransform(BACKBONES.get(backbone).input)


def rgb_in_channels(backbone: str, in_channels: int) -> int:
    """ImageNet-style trunks always take 3 channels: grey (1) images are repeated to RGB."""
    if in_channels not in (1, 3):
        raise UserError(
            f"backbone {backbone!r} takes 1 (grey, repeated to RGB) or 3 image channels; got "
            f"{in_channels} (use backbone=smallcnn for such data)"
        )
    return 3


class SmallCNN(nn.Module):
    """Four conv-BN-ReLU blocks (each halves the resolution but the last): fit for CPU.

    About 0.4 M parameters; on 32×32 inputs a 2-core CPU trains it at a few thousand images/s.
    """

    def __init__(self, *, in_channels: int, widths: tuple[int, ...] = (32, 64, 128, 256)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = in_channels
        for i, width in enumerate(widths):
            layers += [
                nn.Conv2d(channels, width, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            ]
            if i < len(widths) - 1:
                layers.append(nn.MaxPool2d(2))
            channels = width
        self.body = nn.Sequential(*layers)
        self.out_channels = channels
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.body(x)


@register_backbone("smallcnn", description="4-block CNN for small images on CPU (no weights)")
def _smallcnn(*, in_channels: int) -> tuple[nn.Module, int]:
    net = SmallCNN(in_channels=in_channels)
    return net, net.out_channels
