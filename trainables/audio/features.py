"""Kaldi-style speech features in torch: MFCC and log-mel filterbanks, sliding CMN, energy VAD.

What the learned-distance source used on VoxCeleb (Monteiro et al. ICML 2020, §4.2 and App. A.3:
30 MFCCs, 25 ms windows every 10 ms at 16 kHz, an energy VAD, features from Kaldi's VoxCeleb
recipe), written from Kaldi's definitions (``feat/feature-window.cc``, ``feature-mfcc.cc``,
``mel-computations.cc``, ``ivector/voice-activity-detection.cc``, ``transform/cmvn.cc``):

* **frames**: ``frame_ms`` windows every ``shift_ms``. ``snip_edges`` true keeps the frames that
  fit (``1 + (N - L) // S``); false (the VoxCeleb recipe's) gives ``(N + S/2) // S`` frames centred
  on multiples of the shift, the signal reflected at its ends. Per frame: the DC offset removed,
  the raw log energy taken (before pre-emphasis, floored at float32 epsilon), pre-emphasis 0.97
  (``x[i] -= 0.97 x[i-1]``, ``x[0] -= 0.97 x[0]``), Povey's window ``(0.5 - 0.5 cos)^0.85``, zero
  padding to the next power of two, the power spectrum;
* **mel filterbank**: triangles evenly spaced on Kaldi's mel scale ``1127 ln(1 + f/700)`` between
  ``low_hz`` and ``high_hz`` (``<= 0``: that far below Nyquist), over the FFT bins below Nyquist;
  ``fbank`` is the log of their energies (floored at epsilon);
* **MFCC**: the orthonormal DCT-II of the log mel energies (Kaldi's ``ComputeDctMatrix``), the
  first ``n_features`` kept, the sinusoidal lifter ``1 + (Q/2) sin(pi k / Q)``, Q = 22, and C0
  replaced by the raw log energy (Kaldi's ``use_energy`` default);
* **sliding CMN** (``apply-cmvn-sliding --center=true --norm-vars=false``, the recipe's 300-frame
  window): each frame minus the mean of a window of ``cmn_window`` frames centred on it, shifted
  to stay inside the utterance (shorter utterances: the mean of all frames);
* **energy VAD** (``compute-vad`` with the VoxCeleb recipe's ``vad.conf``: threshold 5.5, mean
  scale 0.5, context 2, proportion 0.12): a frame is voiced when at least 12% of the frames within
  two of it have a log energy above ``5.5 + 0.5 * mean log energy``. The recipe computes the VAD
  on the raw features, normalises every frame, then keeps the voiced ones: so does :func:`extract`.

Waveforms are float in the int16 scale (Kaldi reads 16-bit PCM as integers), so the energies and
the VAD threshold mean what they mean in Kaldi. No dither (Kaldi's default is 1.0): features are
deterministic. Everything takes a batch ``[..., samples]`` on any device; :func:`extract` is one
utterance's whole pipeline. A test compares them with torchaudio's Kaldi-compatible functions
where torchaudio imports, and with a slow NumPy reference always.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch

from dmlsearch.trainables.errors import UserError

__all__ = [
    "FEATURE_KINDS",
    "FeatureSpec",
    "energy_vad",
    "extract",
    "fbank",
    "frame_count",
    "log_mel_and_energy",
    "mel_banks",
    "mfcc",
    "sliding_cmn",
]

FEATURE_KINDS = ("mfcc", "fbank")
EPSILON = float(torch.finfo(torch.float32).eps)  # Kaldi's floor of energies before the log
PREEMPHASIS = 0.97
LIFTER = 22.0
#: The VoxCeleb recipe's ``conf/vad.conf``.
VAD_THRESHOLD, VAD_MEAN_SCALE, VAD_CONTEXT, VAD_PROPORTION = 5.5, 0.5, 2, 0.12
#: An utterance the VAD leaves with fewer voiced frames than this keeps all its frames (a model
#: needs frames to pool; Kaldi's recipe drops such utterances instead).
MIN_VOICED_FRAMES = 20


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """How a waveform becomes features ``[n_features, frames]``.

    Attributes:
        kind: ``mfcc`` (cepstra, C0 = log energy) or ``fbank`` (log mel energies).
        n_features: cepstra kept (``mfcc``; at most ``n_mels``) or mel bins (``fbank``).
        n_mels: mel bins behind the cepstra (``mfcc`` only).
        sample_rate: Hz the waveform must have (readers resample to it).
        frame_ms, shift_ms: window length and hop.
        low_hz, high_hz: the filterbank's edges (``high_hz <= 0``: that far below Nyquist).
        snip_edges: Kaldi's option (see the module's notes).
        cmn_window: frames of the sliding mean normalisation (0: none).
        vad: keep only the frames the energy VAD calls voiced.

    Defaults: the source's 30 MFCCs, 25 ms / 10 ms at 16 kHz (App. A.3); the filterbank, edge
    handling, 300-frame CMN and VAD of Kaldi's VoxCeleb v2 recipe (40 mel bins, 20–7600 Hz,
    ``snip-edges=false``), whose first stage the source ran.
    """

    kind: str = "mfcc"
    n_features: int = 30
    n_mels: int = 40
    sample_rate: int = 16_000
    frame_ms: float = 25.0
    shift_ms: float = 10.0
    low_hz: float = 20.0
    high_hz: float = 7600.0
    snip_edges: bool = False
    cmn_window: int = 300
    vad: bool = True

    def __post_init__(self) -> None:
        if self.kind not in FEATURE_KINDS:
            raise UserError(f"audio_features must be one of {', '.join(FEATURE_KINDS)}, got "
                            f"{self.kind!r}; set audio_features=mfcc")
        if not 1 <= self.n_features <= 256:
            raise UserError(f"n_features must be in 1..256, got {self.n_features}; set e.g. "
                            "n_features=30")
        if self.kind == "mfcc" and self.n_features > self.n_mels:
            raise UserError(f"n_features ({self.n_features}) MFCCs need at least as many mel "
                            f"bins, got {self.n_mels}; set n_features to {self.n_mels} or less, "
                            "or audio_features=fbank (log mel, up to 256 bins)")
        if self.cmn_window < 0:
            raise UserError(f"cmn_window must be >= 0 (0: no mean normalisation), got "
                            f"{self.cmn_window}")
        nyquist = self.sample_rate / 2
        high = self.high_hz if self.high_hz > 0 else nyquist + self.high_hz
        if not 0 <= self.low_hz < high <= nyquist:
            raise ValueError(f"filterbank edges {self.low_hz}..{high} Hz must lie in "
                             f"0..{nyquist} Hz")

    @property
    def frame_length(self) -> int:
        """Samples per window (400 at 16 kHz, 25 ms)."""
        return int(self.sample_rate * self.frame_ms / 1000)

    @property
    def frame_shift(self) -> int:
        """Samples per hop (160 at 16 kHz, 10 ms)."""
        return int(self.sample_rate * self.shift_ms / 1000)

    @property
    def fft_size(self) -> int:
        return 1 << (self.frame_length - 1).bit_length()

    @property
    def frames_per_second(self) -> float:
        return self.sample_rate / self.frame_shift


def frame_count(samples: int, spec: FeatureSpec) -> int:
    """Frames :func:`mfcc` / :func:`fbank` give for ``samples`` samples."""
    length, shift = spec.frame_length, spec.frame_shift
    if spec.snip_edges:
        return 0 if samples < length else 1 + (samples - length) // shift
    return (samples + shift // 2) // shift


def _frames(wave: torch.Tensor, spec: FeatureSpec) -> torch.Tensor:
    """``[..., samples]`` → ``[..., frames, frame_length]`` (Kaldi's ``ExtractWindow`` layout)."""
    length, shift = spec.frame_length, spec.frame_shift
    samples = wave.shape[-1]
    count = frame_count(samples, spec)
    if count == 0:
        raise UserError(f"an utterance of {samples} samples is shorter than one "
                        f"{spec.frame_ms:g} ms frame; remove it from the dataset")
    if spec.snip_edges:
        return wave.unfold(-1, length, shift)[..., :count, :]
    # Frame m covers samples m*shift + shift/2 - length/2 + [0, length), reflected at the ends
    # (Kaldi: i < 0 -> -i - 1, i >= N -> 2N - 1 - i): pad with mirrored samples, then slide.
    start = shift // 2 - length // 2
    left = max(0, -start)
    right = max(0, start + shift * (count - 1) + length - samples)
    if left > samples or right > samples:  # shorter than half a frame: reflect sample by sample
        index = start + shift * torch.arange(count, device=wave.device)[:, None] \
            + torch.arange(length, device=wave.device)[None, :]
        while bool(((index < 0) | (index >= samples)).any()):
            index = torch.where(index < 0, -index - 1, index)
            index = torch.where(index >= samples, 2 * samples - 1 - index, index)
        return wave[..., index]
    padded = torch.cat([wave[..., :left].flip(-1), wave,
                        wave[..., samples - right:].flip(-1)], dim=-1)
    return padded[..., start + left:].unfold(-1, length, shift)[..., :count, :]


@functools.lru_cache(maxsize=16)
def _window(length: int) -> torch.Tensor:
    n = torch.arange(length, dtype=torch.float64)
    return (0.5 - 0.5 * torch.cos(2 * math.pi * n / (length - 1))).pow(0.85)


def _mel(hz: torch.Tensor | float) -> torch.Tensor:
    return 1127.0 * torch.log1p(torch.as_tensor(hz, dtype=torch.float64) / 700.0)


@functools.lru_cache(maxsize=16)
def mel_banks(spec: FeatureSpec) -> torch.Tensor:
    """Kaldi's triangular mel filters, float64 ``[n_mels, fft_size // 2]`` (the bins below
    Nyquist; ``n_mels`` is ``n_features`` for ``fbank``)."""
    bins = spec.n_mels if spec.kind == "mfcc" else spec.n_features
    nyquist = spec.sample_rate / 2
    high = spec.high_hz if spec.high_hz > 0 else nyquist + spec.high_hz
    mel_low, mel_high = float(_mel(spec.low_hz)), float(_mel(high))
    delta = (mel_high - mel_low) / (bins + 1)
    fft_mel = _mel(torch.arange(spec.fft_size // 2, dtype=torch.float64)
                   * spec.sample_rate / spec.fft_size)
    left = mel_low + delta * torch.arange(bins, dtype=torch.float64)[:, None]
    centre, right = left + delta, left + 2 * delta
    up = (fft_mel - left) / (centre - left)
    down = (right - fft_mel) / (right - centre)
    weights = torch.where(fft_mel <= centre, up, down)
    return torch.where((fft_mel > left) & (fft_mel < right), weights, torch.zeros(()))


@functools.lru_cache(maxsize=16)
def _dct_lifted(n_mels: int, n_ceps: int) -> torch.Tensor:
    """Kaldi's DCT-II rows 0..n_ceps-1 (orthonormal), each times its lifter:
    ``[n_ceps, n_mels]``."""
    k = torch.arange(n_ceps, dtype=torch.float64)[:, None]
    n = torch.arange(n_mels, dtype=torch.float64)[None, :]
    dct = torch.cos(math.pi / n_mels * (n + 0.5) * k) * math.sqrt(2.0 / n_mels)
    dct[0] = math.sqrt(1.0 / n_mels)
    lifter = 1.0 + 0.5 * LIFTER * torch.sin(math.pi * torch.arange(n_ceps) / LIFTER)
    return dct * lifter[:, None].to(torch.float64)


def log_mel_and_energy(wave: torch.Tensor, spec: FeatureSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log mel energies [..., bins, frames], raw log energy [..., frames])`` of ``wave``
    ``[..., samples]`` (float, int16 scale)."""
    if not torch.is_floating_point(wave):
        wave = wave.float()
    frames = _frames(wave, spec).to(torch.float32)
    frames = frames - frames.mean(dim=-1, keepdim=True)
    energy = frames.square().sum(dim=-1).clamp_min(EPSILON).log()
    emphasised = torch.empty_like(frames)
    emphasised[..., 1:] = frames[..., 1:] - PREEMPHASIS * frames[..., :-1]
    emphasised[..., 0] = frames[..., 0] * (1.0 - PREEMPHASIS)
    frames = emphasised * _window(spec.frame_length).to(frames)
    spectrum = torch.fft.rfft(frames, n=spec.fft_size).abs().square()[..., :spec.fft_size // 2]
    mel = spectrum @ mel_banks(spec).to(spectrum).T
    return mel.clamp_min(EPSILON).log().transpose(-1, -2), energy


def fbank(wave: torch.Tensor, spec: FeatureSpec | None = None) -> torch.Tensor:
    """Log mel filterbank energies ``[..., n_features, frames]`` of ``wave`` ``[..., samples]``."""
    spec = spec or FeatureSpec(kind="fbank", n_features=40)
    if spec.kind != "fbank":
        spec = dataclasses.replace(spec, kind="fbank")
    return log_mel_and_energy(wave, spec)[0]


def mfcc(wave: torch.Tensor, spec: FeatureSpec | None = None) -> torch.Tensor:
    """MFCCs ``[..., n_features, frames]`` (C0 = raw log energy) of ``wave`` ``[..., samples]``."""
    spec = spec or FeatureSpec()
    if spec.kind != "mfcc":
        spec = dataclasses.replace(spec, kind="mfcc")
    log_mel, energy = log_mel_and_energy(wave, spec)
    ceps = _dct_lifted(spec.n_mels, spec.n_features).to(log_mel) @ log_mel
    return torch.cat([energy.unsqueeze(-2), ceps[..., 1:, :]], dim=-2)


def sliding_cmn(features: torch.Tensor, window: int = 300) -> torch.Tensor:
    """Each frame of ``features`` ``[..., dims, frames]`` minus the mean of the ``window`` frames
    centred on it (Kaldi's centred sliding window, shifted to stay inside; see module notes)."""
    frames = features.shape[-1]
    if window <= 0 or frames == 0:
        return features
    t = torch.arange(frames, device=features.device)
    start = t - window // 2
    end = start + window
    shift_right = (-start).clamp_min(0)
    start, end = start + shift_right, end + shift_right
    shift_left = (end - frames).clamp_min(0)
    start, end = (start - shift_left).clamp_min(0), end - shift_left
    total = torch.nn.functional.pad(features.double().cumsum(dim=-1), (1, 0))
    mean = (total[..., end] - total[..., start]) / (end - start).to(torch.float64)
    return (features.double() - mean).to(features.dtype)


def energy_vad(log_energy: torch.Tensor) -> torch.Tensor:
    """Voiced-frame mask ``[frames]`` from the raw log energy ``[frames]`` (Kaldi's compute-vad
    with the VoxCeleb recipe's settings; see the module's notes)."""
    frames = log_energy.shape[-1]
    if frames == 0:
        return torch.zeros(0, dtype=torch.bool, device=log_energy.device)
    threshold = VAD_THRESHOLD + VAD_MEAN_SCALE * log_energy.double().mean()
    loud = (log_energy.double() > threshold).double()
    kernel = torch.ones(1, 1, 2 * VAD_CONTEXT + 1, dtype=torch.float64, device=loud.device)
    count = torch.nn.functional.conv1d(loud.view(1, 1, -1), kernel, padding=VAD_CONTEXT).view(-1)
    ones = torch.ones_like(loud).view(1, 1, -1)
    window = torch.nn.functional.conv1d(ones, kernel, padding=VAD_CONTEXT).view(-1)
    return count >= window * VAD_PROPORTION


def extract(wave: torch.Tensor, spec: FeatureSpec) -> torch.Tensor:
    """One utterance's features as the VoxCeleb recipe prepares them: ``wave`` ``[samples]``
    (float, int16 scale) → float32 ``[n_features, frames]``: MFCC or fbank, the VAD decided on
    the raw log energy, sliding CMN over every frame, then only the voiced frames (all of them
    when fewer than :data:`MIN_VOICED_FRAMES` are voiced)."""
    if wave.ndim != 1:
        raise ValueError(f"extract takes one waveform [samples], got shape {tuple(wave.shape)}")
    log_mel, energy = log_mel_and_energy(wave, spec)
    if spec.kind == "mfcc":
        ceps = _dct_lifted(spec.n_mels, spec.n_features).to(log_mel) @ log_mel
        feats = torch.cat([energy.unsqueeze(0), ceps[1:]], dim=0)
    else:
        feats = log_mel
    feats = sliding_cmn(feats, spec.cmn_window)
    if spec.vad:
        voiced = energy_vad(energy)
        if int(voiced.sum()) >= MIN_VOICED_FRAMES:
            feats = feats[:, voiced]
    return feats.contiguous()
