"""Backbones, their input conventions and pretrained weights, and the embedding head.

Registered backbones: ``smallcnn`` (CPU-sized), ``resnet18``, ``resnet50``, ``googlenet``
(torchvision architectures) and ``bninception`` (Cadene's layout) for images; ``tdnn`` (the E2E
source's x-vector TDNN) and ``tdnn_small`` for audio features. ``pretrained`` weights come from
the local torch hub cache or a file, never from the network.
"""

from __future__ import annotations

# Importing these modules registers their backbones.
from dmlsearch.trainables.models import _bninception  # noqa: F401
from dmlsearch.trainables.models import _googlenet  # noqa: F401
from dmlsearch.trainables.models import _resnet  # noqa: F401
from dmlsearch.trainables.models import _tdnn  # noqa: F401
from dmlsearch.trainables.models import _timm  # noqa: F401  (the timm:<model> family)
from dmlsearch.trainables.models._backbones import BACKBONES
from dmlsearch.trainables.models._backbones import BackboneInfo
from dmlsearch.trainables.models._backbones import SmallCNN
from dmlsearch.trainables.models._backbones import input_transform
from dmlsearch.trainables.models._backbones import register_backbone
from dmlsearch.trainables.models._bninception import BNInception
from dmlsearch.trainables.models._embedding import EmbeddingNet
from dmlsearch.trainables.models._embedding import build_model
from dmlsearch.trainables.models._embedding import prepare_input
from dmlsearch.trainables.models._normalize import CAFFE_BGR
from dmlsearch.trainables.models._normalize import IMAGENET
from dmlsearch.trainables.models._normalize import SYMMETRIC
from dmlsearch.trainables.models._normalize import InputSpec
from dmlsearch.trainables.models._normalize import InputTransform
from dmlsearch.trainables.models._serving import RawImageEmbedder
from dmlsearch.trainables.models._tdnn import TDNN
from dmlsearch.trainables.models._tdnn import FeatureInput
from dmlsearch.trainables.models._tdnn import Utterances
from dmlsearch.trainables.models._weights import ImagenetWeights
from dmlsearch.trainables.models._weights import imagenet_path

__all__ = [
    "BACKBONES",
    "BNInception",
    "BackboneInfo",
    "CAFFE_BGR",
    "EmbeddingNet",
    "FeatureInput",
    "IMAGENET",
    "ImagenetWeights",
    "InputSpec",
    "InputTransform",
    "RawImageEmbedder",
    "SYMMETRIC",
    "SmallCNN",
    "TDNN",
    "Utterances",
    "build_model",
    "imagenet_path",
    "input_transform",
    "prepare_input",
    "register_backbone",
]
