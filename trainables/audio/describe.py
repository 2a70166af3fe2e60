"""What a recipe card (``dmlsearch spaces show``) says of an audio configuration, in words: the
audio kind's ``describe_input`` and ``describe_crops`` (:mod:`trainables.input_kinds`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dmlsearch.trainables.config import TrialConfig

__all__ = ["crops_text", "input_text"]


def input_text(cfg: TrialConfig) -> str:
    """The features an audio model takes."""
    vad = "energy VAD" if cfg.vad else "no VAD"
    cmn = (f"sliding mean normalisation over {cfg.cmn_window} frames" if cfg.cmn_window
           else "no mean normalisation")
    return f"{cfg.n_features} {cfg.audio_features} features per 10 ms frame ({vad}, {cmn})"


def crops_text(setting: Callable[[str], str]) -> str:
    """What a trial's utterances are cut to; ``setting(key)``: the card's words for a setting."""
    return ("training: each batch cut to a random length in [max_frames / 4, max_frames) frames "
            f"of 10 ms, max_frames {setting('max_frames')} (shorter utterances repeated); "
            "evaluation: whole utterances")
