"""The TDNN speaker encoder of the learned-distance source (``tdnn``) and a CPU-sized one.

Monteiro et al. ICML 2020, App. A.3.1 (Table 3) and their reference code (``asv/model.py``,
``TDNN``, after PASE's x-vector TDNN): five 1-D convolutions over time on the features
``[B, n_features, T]``, each followed by batch normalisation and ReLU:

====  ===========  ======  =======  =======
conv  in -> out    kernel  padding  frames
====  ===========  ======  =======  =======
1     F -> 512     5       2        T
2     512 -> 512   5       2        T
3     512 -> 512   5       3        T + 2
4     512 -> 512   7       0        T - 4
5     512 -> 1500  1       0        T - 4
====  ===========  ======  =======  =======

(the code uses no dilation, though the paper calls the convolutions dilated), then statistics
pooling (the mean and standard deviation of every channel over time: 3,000 values) and a 512-d
segment layer (a 1x1 convolution, batch normalisation, ReLU), 7.2 M parameters with its heads.
The trunk returns that segment layer as ``[B, 512, 1]``; the embedding head of
:class:`~trainables.models.EmbeddingNet` maps it to the searched embedding size and
L2-normalises it (the reference's second post-pooling block ends in the searched ``n_z`` too).
The reference feeds D the 512-d segment layer; here D, like the cosine, sees the embedding
(:mod:`trainables.losses.e2e`).

``tdnn_small`` keeps the layout at a quarter of the width (128 channels, 384 before pooling,
a 128-d segment layer; 0.5 M parameters), for CPUs and ``--preview``.

Inputs are features, not pixels: :class:`FeatureInput` (the models' ``input_transform``) only
moves them to the device as float32.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.models._backbones import register_backbone

__all__ = ["FeatureInput", "StatisticsPooling", "TDNN"]


@dataclasses.dataclass(frozen=True)
class FeatureInput:
    """A model's input transform for audio: features ``[B, F, T]`` → float32 (a plain,
    picklable object like the image backbones' ``InputTransform``)."""

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        if features.ndim != 3:
            raise UserError(f"expected audio features of shape [B, n_features, T]; got shape "
                            f"{tuple(features.shape)} (an image dataset with an audio backbone? "
                            "use backbone=smallcnn for images)")
        return features.to(torch.float32)


class StatisticsPooling(nn.Module):
    """``[B, C, T]`` → ``[B, 2C, 1]``: the mean and the (unbiased) standard deviation over time."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=2, keepdim=True)
        std = (x.var(dim=2, keepdim=True, unbiased=True) + 1e-6).sqrt()
        return torch.cat([mean, std], dim=1)


def _block(c_in: int, c_out: int, kernel: int, padding: int) -> list[nn.Module]:
    return [nn.Conv1d(c_in, c_out, kernel, padding=padding), nn.BatchNorm1d(c_out),
            nn.ReLU(inplace=True)]


class TDNN(nn.Module):
    """Frame layers, statistics pooling and the segment layer (see the module's notes)."""

    #: frames the five convolutions remove: an input needs more than this many frames
    SHRINK = 4

    def __init__(self, *, in_channels: int, width: int = 512, frame_out: int = 1500,
                 segment: int = 512) -> None:
        super().__init__()
        self.frames = nn.Sequential(
            *_block(in_channels, width, 5, 2), *_block(width, width, 5, 2),
            *_block(width, width, 5, 3), *_block(width, width, 7, 0),
            *_block(width, frame_out, 1, 0))
        self.pooling = StatisticsPooling()
        self.segment = nn.Sequential(*_block(2 * frame_out, segment, 1, 0))
        self.out_channels = segment
        for m in self.modules():
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] <= self.SHRINK + 1:
            raise UserError(f"the TDNN needs more than {self.SHRINK + 1} frames per utterance, "
                            f"got {x.shape[-1]}; raise max_frames")
        return self.segment(self.pooling(self.frames(x)))


@register_backbone("tdnn", description="x-vector TDNN of the E2E source (5 conv1d layers, "
                   "statistics pooling, 512-d segment layer; audio features)",
                   input_kind="audio")
def _tdnn(*, in_channels: int) -> tuple[nn.Module, int]:
    net = TDNN(in_channels=in_channels)
    return net, net.out_channels


@register_backbone("tdnn_small", description="the TDNN at a quarter of the width (128 "
                   "channels), for CPUs and --preview (audio features)", input_kind="audio")
def _tdnn_small(*, in_channels: int) -> tuple[nn.Module, int]:
    net = TDNN(in_channels=in_channels, width=128, frame_out=384, segment=128)
    return net, net.out_channels
