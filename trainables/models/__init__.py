"""Backbones, their input conventions and pretrained weights, and the embedding head.

Registered backbones: ``smallcnn`` (CPU-sized), ``resnet18``, ``resnet50``, ``googlenet``
(torchvision architectures) and ``bninception`` (Cadene's layout). ``pretrained`` weights come from
the local torch hub cache or a file, never from the network.
"""

from __future__ import annotations

# Importing these modules registers their backbones.
from trainables.models import _bninception  # noqa: F401
from trainables.models import _googlenet  # noqa: F401
from trainables.models import _resnet  # noqa: F401
from trainables.models._backbones import BACKBONES
from trainables.models._backbones import BackboneInfo
from trainables.models._backbones import SmallCNN
from trainables.models._backbones import input_transform
from trainables.models._backbones import register_backbone
from trainables.models._bninception import BNInception
from trainables.models._embedding import EmbeddingNet
from trainables.models._embedding import build_model
from trainables.models._embedding import prepare_input
from trainables.models._normalize import CAFFE_BGR
from trainables.models._normalize import IMAGENET
from trainables.models._normalize import SYMMETRIC
from trainables.models._normalize import InputSpec
from trainables.models._normalize import InputTransform
from trainables.models._serving import RawImageEmbedder
from trainables.models._weights import ImagenetWeights
from trainables.models._weights import imagenet_path

__all__ = [
    "BACKBONES",
    "BNInception",
    "BackboneInfo",
    "CAFFE_BGR",
    "EmbeddingNet",
    "IMAGENET",
    "ImagenetWeights",
    "InputSpec",
    "InputTransform",
    "RawImageEmbedder",
    "SYMMETRIC",
    "SmallCNN",
    "build_model",
    "imagenet_path",
    "input_transform",
    "prepare_input",
    "register_backbone",
]
