"""The audio datasets' registry entries: ``speakers`` (built in), ``voxceleb1``, ``voxceleb2``,
``speaker_folder``. Their builders live in :mod:`trainables.audio.corpora`, imported only when a
dataset is built (so importing ``trainables.data`` does not import the audio stack)."""

from __future__ import annotations

from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._registry import register_dataset

__all__ = ["FOLDER_LAYOUT", "VOXCELEB1_LAYOUT", "VOXCELEB2_LAYOUT"]

VOXCELEB1_LAYOUT = ("a VoxCeleb1 folder: wav/idXXXXX/<video>/NNNNN.wav (vox1_dev_wav.zip and "
                    "vox1_test_wav.zip unpacked together) and veri_test2.txt beside wav/")
VOXCELEB2_LAYOUT = ("a VoxCeleb2 folder: aac/idXXXXX/<video>/NNNNN.m4a (or a converted "
                    "wav/ tree), optionally with a VoxCeleb1 folder voxceleb1/ to test on")
FOLDER_LAYOUT = ("a folder <speaker>/**/*.{wav,flac,ogg,mp3,m4a} (one sub-folder per speaker), "
                 "optionally with trials.txt (lines 'label enrol test') naming its test speakers")


@register_dataset("speakers", description="built in: 160 voices synthesised by espeak-ng "
                  "(8 English accents, random sentences, session noise), 9 utterances each; "
                  "needs the espeak-ng program", input_kind="audio")
def _speakers(*, root: str | None, image_size: int | None, seed: int) -> Dataset:
    from dmlsearch.trainables.audio.corpora import build_speakers

    return build_speakers(seed)


@register_dataset("voxceleb1", description="VoxCeleb1 speaker verification: 1,211 training "
                  "speakers, the 40 test speakers on veri_test2.txt", needs_root=True,
                  layout=VOXCELEB1_LAYOUT, input_kind="audio")
def _voxceleb1(*, root: str | None, image_size: int | None, seed: int) -> Dataset:
    from dmlsearch.trainables.audio.corpora import build_voxceleb1

    return build_voxceleb1(root)


@register_dataset("voxceleb2", description="VoxCeleb2 (m4a via ffmpeg, or converted wav): its "
                  "speakers train; tested on VoxCeleb1's trial list when voxceleb1/ is beside",
                  needs_root=True, layout=VOXCELEB2_LAYOUT, input_kind="audio")
def _voxceleb2(*, root: str | None, image_size: int | None, seed: int) -> Dataset:
    from dmlsearch.trainables.audio.corpora import build_voxceleb2

    return build_voxceleb2(root)


@register_dataset("speaker_folder", description="any speaker-per-folder tree of audio files "
                  "(wav, flac, ogg, mp3; m4a via ffmpeg), optionally with trials.txt",
                  needs_root=True, layout=FOLDER_LAYOUT, input_kind="audio")
def _speaker_folder(*, root: str | None, image_size: int | None, seed: int) -> Dataset:
    from dmlsearch.trainables.audio.corpora import build_speaker_folder

    return build_speaker_folder(root)
