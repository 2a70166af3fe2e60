"""Reading audio files as 16-bit samples at the features' sample rate.

WAV, FLAC, OGG and MP3 are read with ``soundfile`` (its wheel bundles libsndfile); anything else
(VoxCeleb2's ``.m4a``: AAC, which libsndfile does not decode) goes through the ``ffmpeg`` program
when it is on the PATH, and is a one-line error that says how to get it or convert the files when
it is not. Multi-channel audio is averaged to mono; another sample rate is resampled with a
polyphase filter (``scipy.signal.resample_poly``). Samples come back as int16 values (Kaldi's
scale, which the features and the VAD threshold assume).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess

import numpy as np

from dmlsearch.trainables.errors import UserError

__all__ = ["FFMPEG_HINT", "SOUNDFILE_EXTENSIONS", "ffmpeg_path", "read_audio", "resample"]

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
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UserError(f"{dataset}: cannot read audio file {path} ({reason}); restore or "
                        "remove that file, or fix --data-root") from None
    if data.shape[1] == 1 and rate == sample_rate:
        return np.ascontiguousarray(data[:, 0])
    mono = data.astype(np.float64).mean(axis=1)
    return _to_int16(resample(mono, rate, sample_rate))


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
