"""BN-Inception (Ioffe & Szegedy 2015) as the DML literature uses it: Cadene's port.

Layer names, shapes and order follow ``pretrainedmodels/models/bninception.py`` (Cadene's
``pretrained-models.pytorch``), so its public ImageNet state_dict ``bn_inception-52deb4733.pth``
loads by key (its ``last_linear`` classifier is left out; its BatchNorm tensors stored as [1, C]
are reshaped on load). Every unit is ``<name>`` (a biased conv) → ``<name>_bn`` → ReLU, registered
flat on the module exactly as there; ``features`` output: 1024 channels at stride 32.

Kept from the port: BatchNorm ``eps=1e-5, momentum=0.9`` (PyTorch's momentum, i.e. running stats
follow the latest batch closely; Proxy-Anchor's and the thesis' code keep it; ``freeze_bn`` makes
it moot), ceil-mode pooling, and the 3×3 / stride-1 *max* pool in ``inception_5b``.
Input convention (see ``_normalize.CAFFE_BGR``): [0, 255], BGR, mean [104, 117, 128], std 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dmlsearch.trainables.models._backbones import register_backbone
from dmlsearch.trainables.models._backbones import rgb_in_channels
from dmlsearch.trainables.models._normalize import CAFFE_BGR
from dmlsearch.trainables.models._normalize import as_rgb
from dmlsearch.trainables.models._weights import ImagenetWeights

__all__ = ["BNInception", "BNINCEPTION_URL"]

BNINCEPTION_URL = "http://data.lip6.fr/cadene/pretrainedmodels/bn_inception-52deb4733.pth"
BN_EPS, BN_MOMENTUM = 1e-5, 0.9

# name, in, 1x1, 3x3 reduce, 3x3, double 3x3 reduce, double 3x3, pool, pool proj.
# "reduce" blocks (3c, 4e) have no 1x1 and no projection; their 3x3s and max pool have stride 2.
_BLOCKS: tuple[tuple[str, int, int, int, int, int, int, str, int], ...] = (
    ("inception_3a", 192, 64, 64, 64, 64, 96, "avg", 32),
    ("inception_3b", 256, 64, 64, 96, 64, 96, "avg", 64),
    ("inception_3c", 320, 0, 128, 160, 64, 96, "reduce", 0),
    ("inception_4a", 576, 224, 64, 96, 96, 128, "avg", 128),
    ("inception_4b", 576, 192, 96, 128, 96, 128, "avg", 128),
    ("inception_4c", 576, 160, 128, 160, 128, 160, "avg", 128),
    ("inception_4d", 608, 96, 128, 192, 160, 192, "avg", 128),
    ("inception_4e", 608, 0, 128, 192, 192, 256, "reduce", 0),
    ("inception_5a", 1056, 352, 192, 320, 160, 224, "avg", 128),
    ("inception_5b", 1024, 352, 192, 320, 192, 224, "max", 128),
)


class BNInception(nn.Module):
    """BN-Inception features: [B, 3, H, W] → [B, 1024, ⌈H/32⌉, ⌈W/32⌉] (Cadene's layer names)."""

    out_channels = 1024

    def __init__(self) -> None:
        super().__init__()
        self._unit("conv1_7x7_s2", 3, 64, 7, stride=2)
        self._unit("conv2_3x3_reduce", 64, 64, 1)
        self._unit("conv2_3x3", 64, 192, 3)
        for name, cin, c1, c3r, c3, cdr, cd, pool, proj in _BLOCKS:
            stride = 2 if pool == "reduce" else 1
            if c1:
                self._unit(f"{name}_1x1", cin, c1, 1)
            self._unit(f"{name}_3x3_reduce", cin, c3r, 1)
            self._unit(f"{name}_3x3", c3r, c3, 3, stride=stride)
            self._unit(f"{name}_double_3x3_reduce", cin, cdr, 1)
            self._unit(f"{name}_double_3x3_1", cdr, cd, 3)
            self._unit(f"{name}_double_3x3_2", cd, cd, 3, stride=stride)
            if proj:
                self._unit(f"{name}_pool_proj", cin, proj, 1)

    def _unit(self, name: str, cin: int, cout: int, k: int, *, stride: int = 1) -> None:
        self.add_module(name, nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2))
        self.add_module(f"{name}_bn", nn.BatchNorm2d(cout, eps=BN_EPS, momentum=BN_MOMENTUM))

    def _run(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self._modules[f"{name}_bn"](self._modules[name](x)), inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._run("conv1_7x7_s2", as_rgb(x))
        x = F.max_pool2d(x, 3, stride=2, ceil_mode=True)
        x = self._run("conv2_3x3", self._run("conv2_3x3_reduce", x))
        x = F.max_pool2d(x, 3, stride=2, ceil_mode=True)
        for name, _, c1, *_rest, pool, proj in _BLOCKS:
            x = self._block(name, x, has_1x1=bool(c1), pool=pool, has_proj=bool(proj))
        return x

    def _block(
        self, name: str, x: torch.Tensor, *, has_1x1: bool, pool: str, has_proj: bool
    ) -> torch.Tensor:
        out = [self._run(f"{name}_1x1", x)] if has_1x1 else []
        out.append(self._run(f"{name}_3x3", self._run(f"{name}_3x3_reduce", x)))
        double = self._run(f"{name}_double_3x3_reduce", x)
        out.append(self._run(f"{name}_double_3x3_2", self._run(f"{name}_double_3x3_1", double)))
        if pool == "avg":
            pooled = F.avg_pool2d(x, 3, stride=1, padding=1, ceil_mode=True,
                                  count_include_pad=True)
        elif pool == "max":
            pooled = F.max_pool2d(x, 3, stride=1, padding=1, ceil_mode=True)
        else:
            pooled = F.max_pool2d(x, 3, stride=2, ceil_mode=True)
        out.append(self._run(f"{name}_pool_proj", pooled) if has_proj else pooled)
        return torch.cat(out, dim=1)


@register_backbone(
    "bninception",
    description="BN-Inception (Cadene's port, the DML standard), 1024 feature channels",
    input=CAFFE_BGR,
    imagenet=ImagenetWeights(url=BNINCEPTION_URL),
)
def _bninception(*, in_channels: int) -> tuple[nn.Module, int]:
    rgb_in_channels("bninception", in_channels)
    return BNInception(), BNInception.out_channels
