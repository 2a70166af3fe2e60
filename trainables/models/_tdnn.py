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
moves them to the device as float32. Training batches are crops of one length, ``[B, F, T]``.
Evaluation batches hold whole utterances of different lengths, packed (:class:`Utterances`):
the TDNN embeds them in padded passes, longest first, each of at most :data:`FRAME_BUDGET`
frames (by device), with the padding zeroed before every convolution and left out of the
statistics, so each utterance gets the embedding it gets alone (the reference code embeds one
utterance at a time: on a GPU that is one kernel launch per layer per utterance; on this
project's 2-core CPU these passes take 0.68x its time for ``tdnn``, 0.39x for ``tdnn_small``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.models._backbones import register_backbone

__all__ = ["FRAME_BUDGET", "FeatureInput", "StatisticsPooling", "TDNN", "Utterances",
           "feature_input"]

#: Frames (utterances x padded length) in one padded pass over whole utterances, by device type.
#: On a CPU small passes win (benchmarks/audio_eval.py, 2 cores: 4,096 frames take 0.68-0.76x
#: the time of one utterance at a time for ``tdnn`` and 0.39x for ``tdnn_small``; 16,384: 0.86x
#: and 0.35x; 65,536: 1.19x and 0.57x); on a GPU the largest pass that fits does: 65,536 frames are
#: 0.4 GB of activations at the full TDNN's 1,500 channels (fp32; not measured on a GPU yet).
FRAME_BUDGET = {"cpu": 1 << 12, "cuda": 1 << 16}


class Utterances(NamedTuple):
    """Whole utterances of different lengths as one batch, packed: ``frames`` ``[F, sum(T)]``
    (each utterance's frames after the previous one's) and their ``lengths`` ``[B]`` (int64,
    kept on the CPU: they steer the passes), in order."""

    frames: torch.Tensor
    lengths: torch.Tensor

    @classmethod
    def pack(cls, items: Sequence[torch.Tensor]) -> Utterances:
        """``[F, T_i]`` features of each utterance → one packed batch."""
        return cls(torch.cat(list(items), dim=1),
                   torch.tensor([int(t.shape[1]) for t in items], dtype=torch.int64))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Utterances:
        return Utterances(self.frames.to(device, non_blocking=non_blocking), self.lengths)

    def pin_memory(self) -> Utterances:
        return Utterances(self.frames.pin_memory(), self.lengths)

    def padded(self, rows: Sequence[int]) -> torch.Tensor:
        """Utterances ``rows`` as ``[len(rows), F, longest]``, zero after each one's end."""
        ends = torch.cumsum(self.lengths, 0).tolist()
        longest = max(int(self.lengths[r]) for r in rows)
        out = self.frames.new_zeros(len(rows), self.frames.shape[0], longest)
        for i, r in enumerate(rows):
            length = int(self.lengths[r])
            out[i, :, :length] = self.frames[:, ends[r] - length:ends[r]]
        return out


@dataclasses.dataclass(frozen=True)
class FeatureInput:
    """A model's input transform for audio: features ``[B, F, T]`` → float32 (a plain,
    picklable object like the image backbones' ``InputTransform``)."""

    def __call__(self, features: torch.Tensor | Utterances) -> torch.Tensor | Utterances:
        if isinstance(features, Utterances):
            return Utterances(features.frames.to(torch.float32), features.lengths)
        if features.ndim != 3:
            raise UserError(f"expected audio features of shape [B, n_features, T]; got shape "
                            f"{tuple(features.shape)} (an image dataset with an audio backbone? "
                            "use backbone=smallcnn for images)")
        return features.to(torch.float32)


def feature_input(spec: object) -> FeatureInput:
    """The audio kind's input transform (``trainables.input_kinds``): features need none of the
    backbone's pixel convention ``spec``."""
    return FeatureInput()


class StatisticsPooling(nn.Module):
    """``[B, C, T]`` → ``[B, 2C, 1]``: the mean and the (unbiased) standard deviation over time."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=2, keepdim=True)
        std = (x.var(dim=2, keepdim=True, unbiased=True) + 1e-6).sqrt()
        return torch.cat([mean, std], dim=1)

    @staticmethod
    def masked(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The same of padded ``[B, C, T]`` whose row b has ``lengths[b]`` valid frames."""
        valid = _valid(lengths, x.shape[-1]).to(x.dtype)
        count = lengths.to(x.device, x.dtype).view(-1, 1, 1)
        mean = (x * valid).sum(dim=2, keepdim=True) / count
        var = (((x - mean) * valid) ** 2).sum(dim=2, keepdim=True) / (count - 1)
        return torch.cat([mean, (var + 1e-6).sqrt()], dim=1)


def _valid(lengths: torch.Tensor, frames: int) -> torch.Tensor:
    """``[B, 1, frames]`` true where a frame is within its row's length."""
    positions = torch.arange(frames, device=lengths.device)
    return (positions < lengths.view(-1, 1)).unsqueeze(1)


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

    def forward(self, x: torch.Tensor | Utterances) -> torch.Tensor:
        if isinstance(x, Utterances):
            return self._whole(x)
        if x.shape[-1] <= self.SHRINK + 1:
            raise UserError(f"the TDNN needs more than {self.SHRINK + 1} frames per utterance, "
                            f"got {x.shape[-1]}; raise max_frames")
        return self.segment(self.pooling(self.frames(x)))

    def _whole(self, x: Utterances) -> torch.Tensor:
        """Whole utterances (see the module's notes): longest first, in padded passes of at
        most :data:`FRAME_BUDGET` frames; the result in the batch's order."""
        if self.training:  # batch norm's batch statistics would average the padding in
            raise RuntimeError("the TDNN embeds whole utterances of different lengths in "
                               "eval mode only; call model.eval() first")
        lengths = x.lengths.tolist()
        if min(lengths) <= self.SHRINK + 1:
            raise UserError(f"the TDNN needs more than {self.SHRINK + 1} frames per utterance, "
                            f"got {min(lengths)}")
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        budget = FRAME_BUDGET.get(x.frames.device.type, FRAME_BUDGET["cpu"])
        out: torch.Tensor | None = None
        while order:
            take = max(1, budget // lengths[order[0]])
            rows, order = order[:take], order[take:]
            h = x.padded(rows)
            valid = torch.tensor([lengths[r] for r in rows], device=h.device)
            for layer in self.frames:
                if isinstance(layer, nn.Conv1d):  # the padding is zero, as alone at its end
                    h = h * _valid(valid, h.shape[-1]).to(h.dtype)
                    h = layer(h)
                    valid = valid + 2 * layer.padding[0] - layer.dilation[0] * (
                        layer.kernel_size[0] - 1)
                else:
                    h = layer(h)
            part = self.segment(self.pooling.masked(h, valid))
            if out is None:
                out = part.new_empty((len(lengths), *part.shape[1:]))
            out[torch.tensor(rows, device=part.device)] = part
        assert out is not None
        return out


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
