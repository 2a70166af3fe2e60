"""How each backbone wants its pixels: scale, channel order, mean / std (per-backbone metadata).

Conventions (the reference DML code: Proxy-Anchor's layout, Psomas' thesis, MemVir):

* ``smallcnn``: uint8 → [-1, 1] (``x / 127.5 - 1``).
* ResNet, GoogLeNet (torchvision ImageNet weights): ``x / 255``, then ImageNet mean / std (RGB).
* BN-Inception (Cadene's Caffe port): keep [0, 255], RGB → BGR, subtract [104, 117, 128] (given in
  B, G, R order), std 1.

Backbones with ImageNet (3-channel) weights get grey images (1 channel, e.g. Omniglot) with the
grey channel repeated three times *before* normalisation, so each copy gets its channel's mean/std.
"""

from __future__ import annotations

import dataclasses

import torch

from dmlsearch.trainables.errors import UserError

__all__ = ["InputSpec", "InputTransform", "CAFFE_BGR", "IMAGENET", "SYMMETRIC", "as_rgb"]


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """``y = (x / 255 - mean) / std`` (or ``(x - mean) / std`` when ``scale_255``), per channel.

    ``mean`` / ``std`` have one entry per channel *after* the optional RGB → BGR flip (``bgr``), or
    a single entry broadcast over every channel. ``rgb``: the network takes 3 channels, so grey
    inputs are repeated to 3.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]
    scale_255: bool = False
    bgr: bool = False
    rgb: bool = False

    def __post_init__(self) -> None:
        assert len(self.mean) == len(self.std) and all(s > 0 for s in self.std), self


#: smallcnn: uint8 → [-1, 1], any channel count (today's ``to_input``).
SYMMETRIC = InputSpec(mean=(0.5,), std=(0.5,))
#: torchvision ImageNet models (ResNet, GoogLeNet).
IMAGENET = InputSpec(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), rgb=True)
#: Cadene's BN-Inception (Caffe weights): [0, 255], BGR, mean [104, 117, 128], std 1.
CAFFE_BGR = InputSpec(mean=(104.0, 117.0, 128.0), std=(1.0, 1.0, 1.0), scale_255=True, bgr=True,
                      rgb=True)


@dataclasses.dataclass(frozen=True)
class InputTransform:
    """Callable: uint8 images [B, C, H, W] (on the compute device) → the float input of a backbone.

    A plain (picklable) object, not a closure; the input is never modified in place.
    """

    spec: InputSpec

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        spec = self.spec
        if images.ndim != 4:
            raise UserError(f"expected images of shape [B, C, H, W]; got shape "
                            f"{tuple(images.shape)} (fix the dataset loader)")
        channels = images.shape[1]
        if spec.rgb:
            if channels == 1:
                images = images.repeat(1, 3, 1, 1)  # grey → the same value in R, G and B
            elif channels != 3:
                raise UserError(f"expected 1 (grey) or 3 (RGB) image channels for an ImageNet "
                                f"backbone; got {channels} (use backbone=smallcnn for such data)")
        if spec.bgr:
            images = images.flip(1)
        x = images.to(dtype=torch.float32, copy=True)
        # One fused affine per channel: (x / s - mean) / std == x / (s * std) - mean / std.
        # For SYMMETRIC this is exactly x / 127.5 - 1, bit for bit today's ``to_input``.
        scale = 1.0 if spec.scale_255 else 255.0
        divisor = [scale * s for s in spec.std]
        offset = [m / s for m, s in zip(spec.mean, spec.std)]
        if len(divisor) == 1:
            return x.div_(divisor[0]).sub_(offset[0])
        if x.shape[1] != len(divisor):
            raise UserError(f"expected {len(divisor)} image channels; got {x.shape[1]}")
        return x.div_(_column(divisor, x)).sub_(_column(offset, x))


def _column(values: list[float], like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=like.dtype, device=like.device).view(1, -1, 1, 1)


def as_rgb(x: torch.Tensor) -> torch.Tensor:
    """A trunk's fallback for grey input that skipped :class:`InputTransform`: repeat to 3."""
    return x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x
