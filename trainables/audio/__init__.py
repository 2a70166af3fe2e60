"""Audio as an input kind: speaker verification on utterances (Monteiro et al. 2020, App. A.3).

An audio dataset's items are utterances and its classes speakers; a model sees features
``[B, n_features, T]`` (float32), not pixels. The parts:

* :mod:`.features`: Kaldi-style MFCC and log-mel fbank in torch, sliding CMN, energy VAD;
* :mod:`.io`: reading files (soundfile; m4a through ffmpeg), resampling;
* :mod:`.audioset`: :class:`AudioSet` (labelled utterances, what an image set answers plus
  ``input_kind``) and its loader (the source's random crops and batch cut, full-length
  evaluation), plugged into :class:`~trainables.data.BatchLoader` through its ``batch_loader``;
* :mod:`.trials`: trial lists (VoxCeleb's ``veri_test2.txt``), checked when a dataset loads;
* :mod:`.corpora` and :mod:`.speakers`: the datasets (registered in ``trainables.data._audio``):
  the built-in espeak-ng ``speakers``, ``voxceleb1``, ``voxceleb2``, ``speaker_folder``.

:func:`configure` applies a trial's audio settings (features, ``max_frames``, ``trial_list``) to
a loaded dataset; :func:`dmlsearch.trainables.trial.load_for` calls it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from dmlsearch.trainables.audio.audioset import AudioLoader
from dmlsearch.trainables.audio.audioset import AudioSet
from dmlsearch.trainables.audio.features import FEATURE_KINDS
from dmlsearch.trainables.audio.features import FeatureSpec
from dmlsearch.trainables.audio.features import energy_vad
from dmlsearch.trainables.audio.features import extract
from dmlsearch.trainables.audio.features import fbank
from dmlsearch.trainables.audio.features import mfcc
from dmlsearch.trainables.audio.features import sliding_cmn
from dmlsearch.trainables.audio.io import read_audio
from dmlsearch.trainables.audio.trials import TrialList
from dmlsearch.trainables.audio.trials import read_trial_list

if TYPE_CHECKING:
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.data import Dataset

__all__ = [
    "FEATURE_KINDS",
    "AudioLoader",
    "AudioSet",
    "FeatureSpec",
    "TrialList",
    "configure",
    "energy_vad",
    "extract",
    "fbank",
    "feature_spec",
    "mfcc",
    "read_audio",
    "read_trial_list",
    "sliding_cmn",
]


def feature_spec(cfg: TrialConfig) -> FeatureSpec:
    """The features a trial's settings ask for (``audio_features``, ``n_features``,
    ``cmn_window``, ``vad``; the rest as :class:`FeatureSpec`'s defaults)."""
    return FeatureSpec(kind=cfg.audio_features, n_features=cfg.n_features,
                       cmn_window=cfg.cmn_window, vad=cfg.vad)


def configure(dataset: Dataset, cfg: TrialConfig) -> Dataset:
    """``dataset`` with ``cfg``'s audio settings: features, ``max_frames`` and, when
    ``trial_list`` is set, that trial list (checked) instead of the dataset's own. Image
    datasets are returned as they are."""
    audio = dataset.images
    if not isinstance(audio, AudioSet):
        return dataset
    audio = audio.with_options(features=feature_spec(cfg), max_frames=cfg.max_frames)
    dataset = dataclasses.replace(dataset, images=audio)
    if cfg.trial_list:
        from dmlsearch.trainables.audio.corpora import attach_trials

        dataset = attach_trials(dataset, read_trial_list(cfg.trial_list))
    return dataset
