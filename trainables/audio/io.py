"""Reading audio files as 16-bit samples at the features' sample rate.

WAV, FLAC, OGG and MP3 are read with ``soundfile`` (its wheel bundles libsndfile); anything else
(VoxCeleb2's ``.m4a``: AAC, which libsndfile does not decode) goes through the ``ffmpeg`` program
when it is on the PATH, and is a one-line error that says how to get it or convert the files when
it is not. Multi-channel audio is averaged to mono; another sample rate is resampled with a
polyphase filter (``scipy.signal.resample_poly``). Samples come back as int16 values (Kaldi's
scale, which the features and the VAD threshold assume).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess

import numpy as np

from dmlsearch.trainables.errors import UserError

__all__ = ["FFMPEG_HINT", "SOUNDFILE_EXTENSIONS", "check_header", "ffmpeg_path", "read_audio",
           "resample"]

#: Extensions soundfile reads; anything else needs ffmpeg.
SOUNDFILE_EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3")
FFMPEG_HINT = (
    "install ffmpeg (Debian/Ubuntu: apt-get install ffmpeg) so dmlsearch can decode them, or "
    "convert them once to 16 kHz wav (ffmpeg -i X.m4a -ac 1 -ar 16000 X.wav, as VoxCeleb2's "
    "usual preparation does, '/aac/' -> '/wav/') and read the wav tree instead"
)


def ffmpeg_path() -> str | None:
    """The ``ffmpeg`` program on the PATH, or None."""
    return shutil.which("ffmpeg")


def resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``samples`` (float) from ``rate`` to ``target`` Hz (polyphase, Kaiser window)."""
    if rate == target:
        return samples
    from scipy.signal import resample_poly

    g = math.gcd(int(rate), int(target))
    return resample_poly(samples, target // g, rate // g)


def _to_int16(samples: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(samples), -32768, 32767).astype(np.int16)


def read_audio(path: str, *, sample_rate: int, dataset: str = "audio") -> np.ndarray:
    """The samples of ``path`` as int16 ``[samples]``, mono, at ``sample_rate`` Hz.

    A missing or undecodable file is a :class:`UserError` naming it.
    """
    ext = os.path.splitext(path)[1].lower()
    if ext not in SOUNDFILE_EXTENSIONS:
        return _read_ffmpeg(path, sample_rate=sample_rate, dataset=dataset)
    import soundfile

    try:
        data, rate = soundfile.read(path, dtype="int16", always_2d=True)
    except (OSError, RuntimeError, soundfile.LibsndfileError) as exc:
        raise _unreadable(path, exc, dataset) from None
    if data.shape[1] == 1 and rate == sample_rate:
        return np.ascontiguousarray(data[:, 0])
    mono = data.astype(np.float64).mean(axis=1)
    return _to_int16(resample(mono, rate, sample_rate))


def check_header(path: str, *, sample_rate: int, frame_length: int, dataset: str) -> None:
    """What can be known of ``path`` without decoding it, checked: a file soundfile reads has a
    header it understands and at least ``frame_length`` samples at ``sample_rate`` Hz; any
    other file (decoded by ffmpeg) exists and is not empty. Else a :class:`UserError` naming
    it, as :func:`read_audio` would raise when a trial reads it."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in SOUNDFILE_EXTENSIONS:
        try:
            empty = os.path.getsize(path) == 0
        except OSError as exc:
            raise _unreadable(path, exc, dataset) from None
        if empty:
            raise _unreadable(path, ValueError("the file is empty"), dataset)
        return
    import soundfile

    try:
        info = soundfile.info(path)
    except (OSError, RuntimeError, soundfile.LibsndfileError) as exc:
        raise _unreadable(path, exc, dataset) from None
    samples = int(info.frames * sample_rate / info.samplerate) if info.samplerate else 0
    if samples < frame_length:
        raise UserError(f"{dataset}: {path} holds {samples} samples at {sample_rate} Hz, "
                        f"shorter than one {1000 * frame_length / sample_rate:g} ms frame of "
                        "features; remove it")


def _unreadable(path: str, exc: BaseException, dataset: str) -> UserError:
    """``path`` cannot be read, and why in words: an empty file says so, an unknown format
    says so (libsndfile's own words repeat the path)."""
    with contextlib.suppress(OSError):
        if os.path.getsize(path) == 0:
            exc = ValueError("the file is empty")
    if isinstance(exc, OSError) and exc.strerror:
        reason = exc.strerror
    else:
        reason = getattr(exc, "error_string", None) or str(exc) or type(exc).__name__
        if reason.rstrip(".") == "Format not recognised":
            reason = "not an audio format libsndfile reads: wav, flac, ogg or mp3"
    return UserError(f"{dataset}: cannot read audio file {path} ({reason.rstrip('.')}); "
                     "restore or remove that file, or fix --data-root")


def _read_ffmpeg(path: str, *, sample_rate: int, dataset: str) -> np.ndarray:
    program = ffmpeg_path()
    if program is None:
        raise UserError(f"{dataset}: {os.path.basename(path)} is {os.path.splitext(path)[1]} "
                        f"audio, which needs the ffmpeg program, not found on the PATH; "
                        f"{FFMPEG_HINT}")
    if not os.path.isfile(path):
        raise UserError(f"{dataset}: cannot read audio file {path} (No such file or directory);"
                        " restore or remove that file, or fix --data-root")
    command = [program, "-nostdin", "-v", "error", "-i", path, "-f", "s16le", "-acodec",
               "pcm_s16le", "-ac", "1", "-ar", str(sample_rate), "-"]
    done = subprocess.run(command, capture_output=True, check=False)
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise UserError(f"{dataset}: ffmpeg cannot decode {path} "
                        f"({message[-1] if message else 'exit ' + str(done.returncode)}); "
                        "restore or remove that file")
    return np.frombuffer(done.stdout, dtype="<i2").astype(np.int16)
