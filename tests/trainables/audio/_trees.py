"""Small audio trees in the official layouts, written by the tests (a few short utterances per
speaker: each speaker its own pitch, so features differ)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import soundfile

RATE = 16_000


def utterance(speaker: int, index: int, *, seconds: float = 0.6) -> np.ndarray:
    """A voiced tone with harmonics at a speaker's own pitch, a silence and some noise."""
    rng = np.random.default_rng([speaker, index])
    t = np.arange(int(seconds * RATE)) / RATE
    f0 = 90 + 17 * speaker + 5 * np.sin(2 * np.pi * (1 + index) * t)
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    voice = sum(np.sin(k * phase) / k for k in range(1, 6))
    voice[: len(t) // 5] = 0  # a lead-in silence
    return np.rint(5000 * voice + 50 * rng.standard_normal(len(t))).astype(np.int16)


def write_wav(path: Path, samples: np.ndarray, rate: int = RATE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(path), samples, rate, subtype="PCM_16")
    return path


def voxceleb1(root: Path, *, dev: Iterable[int] = range(10001, 10007),
              test: Iterable[int] = range(10270, 10273), videos: int = 2,
              per_video: int = 2) -> list[str]:
    """``root/wav/idNNNNN/<video>/NNNNN.wav`` for the dev and test speaker numbers; returns the
    files (relative to wav/), sorted."""
    files = []
    for number in [*dev, *test]:
        for v in range(videos):
            for u in range(per_video):
                rel = f"id{number}/vid{v}abcDEF/{u + 1:05d}.wav"
                write_wav(root / "wav" / rel, utterance(number % 97, v * per_video + u))
                files.append(rel)
    return sorted(files)


def trial_lines(files: list[str], speakers: Iterable[str]) -> list[str]:
    """VoxCeleb-format lines: for every file of ``speakers``, a target and a non-target."""
    chosen = [f for f in files if f.split("/")[0] in set(speakers)]
    lines = []
    for k, enrol in enumerate(chosen):
        speaker = enrol.split("/")[0]
        same = [f for f in chosen if f.split("/")[0] == speaker and f != enrol]
        other = [f for f in chosen if f.split("/")[0] != speaker]
        lines.append(f"1 {enrol} {same[k % len(same)]}")
        lines.append(f"0 {enrol} {other[k % len(other)]}")
    return lines


def speaker_tree(root: Path, speakers: int = 6, per_speaker: int = 3, *,
                 ext: str = ".wav") -> list[str]:
    """``root/<speaker>/<session>/<utt><ext>``; returns the files relative to root."""
    files = []
    for s in range(speakers):
        for u in range(per_speaker):
            rel = f"spk{s:02d}/session{u % 2}/{u:03d}{ext}"
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            soundfile.write(str(path), utterance(s, u), RATE, subtype="PCM_16",
                            format="FLAC" if ext == ".flac" else "WAV")
            files.append(rel)
    return sorted(files)
