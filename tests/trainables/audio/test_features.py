"""Kaldi-style features (``trainables.audio.features``) against a slow NumPy reference written
from Kaldi's definitions (frame by frame, loop by loop), and against torchaudio's
Kaldi-compatible functions where torchaudio imports (it is optional: tests only)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dmlsearch.trainables.audio import FeatureSpec
from dmlsearch.trainables.audio import energy_vad
from dmlsearch.trainables.audio import extract
from dmlsearch.trainables.audio import fbank
from dmlsearch.trainables.audio import mfcc
from dmlsearch.trainables.audio import sliding_cmn
from dmlsearch.trainables.audio.features import frame_count
from dmlsearch.trainables.errors import UserError

EPS = float(np.finfo(np.float32).eps)


# ---- the slow reference -------------------------------------------------------------------
def _mel(f: float) -> float:
    return 1127.0 * math.log(1.0 + f / 700.0)


def reference_banks(spec: FeatureSpec, bins: int) -> np.ndarray:
    """Kaldi's MelBanks, one bin and one FFT bin at a time."""
    fft = 1 << (spec.frame_length - 1).bit_length()
    nyquist = spec.sample_rate / 2
    high = spec.high_hz if spec.high_hz > 0 else nyquist + spec.high_hz
    low_mel, high_mel = _mel(spec.low_hz), _mel(high)
    delta = (high_mel - low_mel) / (bins + 1)
    banks = np.zeros((bins, fft // 2))
    for b in range(bins):
        left, centre, right = low_mel + b * delta, low_mel + (b + 1) * delta, \
            low_mel + (b + 2) * delta
        for i in range(fft // 2):
            m = _mel(i * spec.sample_rate / fft)
            if left < m < right:
                banks[b, i] = (m - left) / (centre - left) if m <= centre else \
                    (right - m) / (right - centre)
    return banks


def reference_frames(wave: np.ndarray, spec: FeatureSpec) -> list[np.ndarray]:
    length, shift, n = spec.frame_length, spec.frame_shift, len(wave)
    count = 1 + (n - length) // shift if spec.snip_edges else (n + shift // 2) // shift
    frames = []
    for m in range(count):
        start = m * shift if spec.snip_edges else m * shift + shift // 2 - length // 2
        frame = np.empty(length)
        for j in range(length):
            i = start + j
            while i < 0 or i >= n:
                i = -i - 1 if i < 0 else 2 * n - 1 - i
            frame[j] = wave[i]
        frames.append(frame)
    return frames


def reference_features(wave: np.ndarray, spec: FeatureSpec) -> np.ndarray:
    """MFCC (C0 = raw log energy) or log fbank, [dims, frames], Kaldi's order of operations."""
    bins = spec.n_mels if spec.kind == "mfcc" else spec.n_features
    banks = reference_banks(spec, bins)
    fft = 1 << (spec.frame_length - 1).bit_length()
    length = spec.frame_length
    window = np.array([(0.5 - 0.5 * math.cos(2 * math.pi * j / (length - 1))) ** 0.85
                       for j in range(length)])
    out = []
    for frame in reference_frames(wave.astype(np.float64), spec):
        frame = frame - frame.mean()
        energy = math.log(max(float(np.dot(frame, frame)), EPS))
        for j in range(length - 1, 0, -1):
            frame[j] -= 0.97 * frame[j - 1]
        frame[0] -= 0.97 * frame[0]
        frame = frame * window
        power = np.abs(np.fft.rfft(frame, n=fft)) ** 2
        log_mel = np.log(np.maximum(banks @ power[: fft // 2], EPS))
        if spec.kind == "fbank":
            out.append(log_mel)
            continue
        ceps = np.empty(spec.n_features)
        for k in range(spec.n_features):
            scale = math.sqrt(1.0 / bins) if k == 0 else math.sqrt(2.0 / bins)
            ceps[k] = scale * sum(log_mel[n] * math.cos(math.pi / bins * (n + 0.5) * k)
                                  for n in range(bins))
            ceps[k] *= 1.0 + 11.0 * math.sin(math.pi * k / 22.0)
        ceps[0] = energy
        out.append(ceps)
    return np.array(out).T


def reference_cmn(feats: np.ndarray, window: int) -> np.ndarray:
    """Kaldi's SlidingWindowCmnInternal, centred, no variance normalisation."""
    dims, frames = feats.shape
    out = np.empty_like(feats)
    for t in range(frames):
        start = t - window // 2
        end = start + window
        if start < 0:
            end -= start
            start = 0
        if end > frames:
            start -= end - frames
            end = frames
            start = max(start, 0)
        out[:, t] = feats[:, t] - feats[:, start:end].mean(axis=1)
    return out


def reference_vad(log_energy: np.ndarray) -> np.ndarray:
    """Kaldi's ComputeVadEnergy with the VoxCeleb recipe's vad.conf."""
    threshold = 5.5 + 0.5 * log_energy.sum() / len(log_energy)
    voiced = np.zeros(len(log_energy), dtype=bool)
    for t in range(len(log_energy)):
        num = den = 0
        for t2 in range(t - 2, t + 3):
            if 0 <= t2 < len(log_energy):
                den += 1
                num += log_energy[t2] > threshold
        voiced[t] = num >= den * 0.12
    return voiced


def speech_like(seconds: float, *, seed: int = 0) -> np.ndarray:
    """A chirp with harmonics, bursts and silences, in the int16 range (a deterministic stand-in
    for speech: energy that comes and goes, a changing spectrum)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    f0 = 110 + 60 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / 16000
    voice = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = (np.sin(2 * np.pi * 1.3 * t) > -0.2).astype(float)
    x = 6000 * voice * envelope + 80 * rng.standard_normal(len(t))
    return np.rint(x).astype(np.int16)


# ---- against the reference ------------------------------------------------------------------
@pytest.mark.parametrize("snip_edges", [False, True])
@pytest.mark.parametrize("kind", ["mfcc", "fbank"])
def test_features_match_the_slow_reference(kind: str, snip_edges: bool) -> None:
    wave = speech_like(0.4, seed=1)
    spec = FeatureSpec(kind=kind, n_features=30 if kind == "mfcc" else 24,
                       snip_edges=snip_edges)
    got = (mfcc if kind == "mfcc" else fbank)(torch.from_numpy(wave.astype(np.float32)), spec)
    want = reference_features(wave, spec)
    assert got.shape == want.shape == (spec.n_features, frame_count(len(wave), spec))
    # float32 against float64: log energies up to ~25, cepstra up to ~100
    np.testing.assert_allclose(got.numpy(), want, atol=2e-3 * max(1.0, np.abs(want).max()))


def test_a_signal_shorter_than_half_a_frame_is_reflected_as_kaldi_does() -> None:
    wave = speech_like(0.012, seed=2)  # 192 samples: the first frame reaches past both ends
    spec = FeatureSpec(snip_edges=False)
    got = mfcc(torch.from_numpy(wave.astype(np.float32)), spec)
    np.testing.assert_allclose(got.numpy(), reference_features(wave, spec), atol=0.05)


def test_a_batch_of_waveforms_gives_the_same_features_as_each_alone() -> None:
    waves = torch.from_numpy(np.stack([speech_like(0.5, seed=s) for s in range(3)])).float()
    together = mfcc(waves)
    for k in range(3):
        torch.testing.assert_close(together[k], mfcc(waves[k]), atol=1e-3, rtol=1e-5)


@pytest.mark.parametrize("frames", [40, 300, 900])
def test_sliding_cmn_matches_kaldi_s_window(frames: int) -> None:
    feats = np.random.default_rng(frames).standard_normal((5, frames)) * 3 + 10
    got = sliding_cmn(torch.from_numpy(feats).float(), 300)
    np.testing.assert_allclose(got.numpy(), reference_cmn(feats, 300), atol=1e-4)
    assert sliding_cmn(torch.ones(2, 7), 0).equal(torch.ones(2, 7))  # 0: off


def test_energy_vad_matches_kaldi_s_rule() -> None:
    rng = np.random.default_rng(3)
    energy = np.concatenate([rng.normal(6, 1, 40), rng.normal(22, 1, 60), rng.normal(6, 1, 30)])
    energy[70] = 5  # one quiet frame inside speech is kept (its neighbours are loud)
    got = energy_vad(torch.from_numpy(energy))
    want = reference_vad(energy)
    assert got.numpy().tolist() == want.tolist()
    assert want[50:100].all() and not want[:30].any() and want[70]


def test_extract_is_features_vad_on_raw_energy_then_cmn_then_voiced_frames() -> None:
    wave = speech_like(2.0, seed=4)
    spec = FeatureSpec()
    raw = reference_features(wave, spec)
    voiced = reference_vad(raw[0])
    want = reference_cmn(raw, 300)[:, voiced]
    got = extract(torch.from_numpy(wave.astype(np.float32)), spec)
    assert 20 < got.shape[1] < raw.shape[1]  # silences removed
    np.testing.assert_allclose(got.numpy(), want, atol=2e-3 * np.abs(want).max())
    no_vad = extract(torch.from_numpy(wave.astype(np.float32)), FeatureSpec(vad=False))
    assert no_vad.shape[1] == raw.shape[1]


def test_an_utterance_the_vad_would_empty_keeps_its_frames() -> None:
    quiet = np.zeros(8000, dtype=np.float32)  # silence: nothing is voiced
    assert extract(torch.from_numpy(quiet), FeatureSpec()).shape == (30, 50)


@pytest.mark.parametrize(("changes", "needle"), [
    ({"kind": "plp"}, "audio_features must be one of mfcc, fbank"),
    ({"n_features": 41}, "need at least as many mel bins"),
    ({"n_features": 0}, "n_features must be in 1..256"),
    ({"cmn_window": -1}, "cmn_window must be >= 0"),
])
def test_impossible_feature_settings_are_user_errors(changes: dict, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        FeatureSpec(**changes)
    with pytest.raises(UserError, match="shorter than one 25 ms frame"):
        mfcc(torch.zeros(100), FeatureSpec(snip_edges=True))


# ---- against torchaudio (optional) ------------------------------------------------------------
def test_features_match_torchaudio_s_kaldi_compliance() -> None:
    kaldi = pytest.importorskip("torchaudio.compliance.kaldi",
                                reason="torchaudio is optional (tests only)")
    functional = pytest.importorskip("torchaudio.functional")
    wave = torch.from_numpy(speech_like(3.0, seed=5).astype(np.float32))
    for snip in (False, True):
        spec = FeatureSpec(snip_edges=snip)
        common = dict(low_freq=spec.low_hz, high_freq=spec.high_hz, snip_edges=snip, dither=0.0,
                      energy_floor=0.0, sample_frequency=16000)
        theirs = kaldi.mfcc(wave[None], num_ceps=30, num_mel_bins=40, use_energy=True,
                            **common).T
        torch.testing.assert_close(mfcc(wave, spec), theirs, atol=2e-3, rtol=1e-4)
        theirs_fb = kaldi.fbank(wave[None], num_mel_bins=40, **common).T
        ours_fb = fbank(wave, FeatureSpec(kind="fbank", n_features=40, snip_edges=snip))
        torch.testing.assert_close(ours_fb, theirs_fb, atol=2e-3, rtol=1e-4)
        cmn = functional.sliding_window_cmn(theirs.T, cmn_window=300, center=True).T
        torch.testing.assert_close(sliding_cmn(theirs, 300), cmn, atol=1e-3, rtol=1e-4)
