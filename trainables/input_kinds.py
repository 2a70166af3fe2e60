"""Which datasets and backbones are about audio, by name, importing nothing heavy.

The driver's reports and the preview (:mod:`dmlsearch.spaces._preview`) need to know whether a
configuration trains on images or on audio without importing torch; the registries
(``trainables.data``, ``trainables.models``) are the truth, and a test checks these names
against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["AUDIO_BACKBONES", "AUDIO_DATASETS", "input_kind", "model_input_text"]

AUDIO_DATASETS = ("speaker_folder", "speakers", "voxceleb1", "voxceleb2")
AUDIO_BACKBONES = ("tdnn", "tdnn_small")


def input_kind(config: Mapping[str, Any]) -> str:
    """``audio`` when a flat configuration names an audio dataset or backbone, else ``image``."""
    if str(config.get("dataset")) in AUDIO_DATASETS or str(config.get("backbone")) in \
            AUDIO_BACKBONES:
        return "audio"
    return "image"


def model_input_text(config: Mapping[str, Any]) -> str:
    """What a registered model of ``config`` takes, in a few words."""
    if input_kind(config) == "audio":
        return "float32 audio features [N, n_features, frames]"
    return "uint8 images [N, C, H, W]"
