"""An audio dataset's settings and files, checked before a search starts.

Photos are all decoded before any trial starts (a store's build, or ``cache=off``'s check).
Utterances are decoded by the trials themselves, as they need their features, so without a check
up front a file that is not audio (random bytes named ``.wav``), an empty one or one shorter than
a frame would fail every trial that reads it, one by one, and the search would end with nothing
but failures. Here:

* :func:`check_audio_settings`: a configuration's audio settings together, no file read (the
  features' :class:`~trainables.audio.FeatureSpec` checks, e.g. no more MFCCs than its 40 mel
  bins); the driver runs it for every categorical choice of a space;
* :func:`check_audio_files`: every file's header read once, in parallel (``soundfile.info``:
  format, sample rate, length; about 0.3 ms a file on one core, so a million utterances take
  about 20 s on 16 cores); files that ffmpeg decodes (``.m4a``) are checked to exist and not be
  empty (probing each would start a process per file), and ffmpeg to be there. A file whose
  header is sound but whose samples are damaged still fails in the trials that read it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dmlsearch.trainables.audio.audioset import AudioSet
from dmlsearch.trainables.audio.io import FFMPEG_HINT
from dmlsearch.trainables.audio.io import SOUNDFILE_EXTENSIONS
from dmlsearch.trainables.audio.io import check_header
from dmlsearch.trainables.audio.io import ffmpeg_path
from dmlsearch.trainables.data._pool import chunks
from dmlsearch.trainables.data._pool import run_chunks
from dmlsearch.trainables.data._pool import workers as cpu_workers
from dmlsearch.trainables.errors import UserError

if TYPE_CHECKING:
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.data._imageset import Dataset

__all__ = ["check_audio_files", "check_audio_settings", "open_utterances"]


def check_audio_settings(cfg: TrialConfig) -> None:
    """The user errors of ``cfg``'s audio settings together (each alone is checked with the
    configuration), before any file is read: the features' (e.g. more MFCCs than mel bins)."""
    from dmlsearch.trainables.audio import feature_spec

    feature_spec(cfg)  # a FeatureSpec checks itself


def open_utterances(dataset: Dataset, cfg: TrialConfig, *, check_files: bool
                    ) -> tuple[Dataset, None]:
    """``dataset`` as a trial reads it (the audio kind's, named by ``trainables.input_kinds``):
    as it is, features computed as batches need them; with ``check_files`` every file's header
    is read first (:func:`check_audio_files`). No store: ``None``."""
    if check_files:
        check_audio_files(dataset.images)
    return dataset, None


def check_audio_files(audio: AudioSet, *, workers: int | None = None) -> None:
    """Raise the first file of ``audio`` a trial could not read (the module's notes)."""
    paths = [audio.path(i) for i in range(len(audio))]
    needs_ffmpeg = next((p for p in paths
                         if os.path.splitext(p)[1].lower() not in SOUNDFILE_EXTENSIONS), None)
    if needs_ffmpeg is not None and ffmpeg_path() is None:
        raise UserError(f"{audio.dataset}: {needs_ffmpeg} is {os.path.splitext(needs_ffmpeg)[1]} "
                        f"audio, which needs the ffmpeg program, not found on the PATH; "
                        f"{FFMPEG_HINT}")
    spec = audio.features
    count = workers or cpu_workers()
    jobs = [(chunk, spec.sample_rate, spec.frame_length, audio.dataset)
            for chunk in chunks(paths, count)]
    for error in run_chunks(jobs, _check_chunk, count):
        if error:
            raise UserError(error)


def _check_chunk(job: tuple[list[str], int, int, str]) -> str:
    """'' or the error of the first file of the chunk that fails (a worker's part)."""
    paths, sample_rate, frame_length, dataset = job
    try:
        for path in paths:
            check_header(path, sample_rate=sample_rate, frame_length=frame_length,
                         dataset=dataset)
    except UserError as exc:
        return str(exc)
    return ""
