"""Benchmark: what audio features cost, as a fraction of real time on one core (issue #24 goal:
under 1%), next to what the model they feed costs on the same audio.

On the built-in ``speakers`` corpus (espeak-ng speech with session noise, 16 kHz; built into
the cache on first use) or any speaker folder (``--root``), for ``--utterances`` utterances, in
one process with one torch thread, ``--repeats`` times:

1. **read**: decoding the FLAC/WAV file (soundfile) to int16 samples;
2. **features**: :func:`trainables.audio.extract` as training uses it (30 MFCCs, energy VAD,
   sliding CMN over 300 frames), and the same without VAD and CMN (the MFCCs alone);
3. **model**: for context, one training step of ``tdnn_small`` (forward, loss, backward, SGD)
   and of ``tdnn`` on a batch of 24 crops of 300 frames (3 s each), per second of audio.

Times are CPU seconds of this process (``time.process_time``, one thread), so they do not grow
when other processes share the cores; each is divided by the audio's duration (the real-time
factor) and reported as the median and the spread (min, max) over the repeats, plus ratios to
the model's step measured in the same run. torchaudio's Kaldi MFCC is timed too when it imports.

    python benchmarks/audio_features.py [--utterances 200] [--repeats 7] [--root DIR]
        [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from dmlsearch.trainables.audio import FeatureSpec  # noqa: E402
from dmlsearch.trainables.audio import extract  # noqa: E402
from dmlsearch.trainables.audio import mfcc  # noqa: E402
from dmlsearch.trainables.audio import read_audio  # noqa: E402
from dmlsearch.trainables.data import load_dataset  # noqa: E402


def _cpu(fn, *args):  # type: ignore[no-untyped-def]
    started = time.process_time()
    fn(*args)
    return time.process_time() - started


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _model_step_seconds(backbone: str, repeats: int) -> list[float]:
    """CPU seconds per second of audio of one training step on 24 x 300 frames."""
    from dmlsearch.trainables.losses import build_loss
    from dmlsearch.trainables.losses import resolve_loss_params
    from dmlsearch.trainables.models import build_model

    torch.manual_seed(0)
    model = build_model(backbone=backbone, in_channels=30, embedding_size=64, pooling="gap")
    loss = build_loss("e2e", resolve_loss_params("e2e", {}), num_classes=24,
                      embedding_size=64).criterion
    opt = torch.optim.SGD([*model.parameters(), *loss.parameters()], lr=0.01, momentum=0.9)
    x = torch.randn(24, 30, 300)
    y = torch.arange(24) // 4

    def step() -> None:
        opt.zero_grad()
        loss(model(x), y).backward()
        opt.step()

    step()
    audio_seconds = 24 * 3.0
    return [_cpu(step) / audio_seconds for _ in range(repeats)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utterances", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--root", default=None, help="a speaker folder (default: built-in)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = (load_dataset("speaker_folder", root=args.root) if args.root
            else load_dataset("speakers"))
    audio = data.images
    paths = [audio.path(i) for i in range(min(args.utterances, len(audio)))]
    waves = [read_audio(p, sample_rate=16000) for p in paths]
    seconds = sum(len(w) for w in waves) / 16000
    tensors = [torch.from_numpy(w.astype(np.float32)) for w in waves]
    full, plain = FeatureSpec(), FeatureSpec(vad=False, cmn_window=0)
    rows: dict[str, list[float]] = {"read": [], "features (mfcc+vad+cmn)": [], "mfcc only": []}
    try:
        import torchaudio.compliance.kaldi as kaldi

        rows["torchaudio kaldi.mfcc"] = []
    except ImportError:
        kaldi = None
    for _ in range(args.repeats):
        rows["read"].append(sum(_cpu(lambda p=p: read_audio(p, sample_rate=16000))
                                for p in paths) / seconds)
        rows["features (mfcc+vad+cmn)"].append(
            sum(_cpu(extract, t, full) for t in tensors) / seconds)
        rows["mfcc only"].append(sum(_cpu(mfcc, t, plain) for t in tensors) / seconds)
        if kaldi is not None:
            rows["torchaudio kaldi.mfcc"].append(sum(_cpu(lambda t=t: kaldi.mfcc(
                t[None], num_ceps=30, num_mel_bins=40, low_freq=20, high_freq=7600,
                snip_edges=False, dither=0.0, energy_floor=0.0, use_energy=True))
                for t in tensors) / seconds)
    rows["train step tdnn_small"] = _model_step_seconds("tdnn_small", args.repeats)
    rows["train step tdnn"] = _model_step_seconds("tdnn", max(3, args.repeats // 2))
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
                   "1 torch thread",
        "date": time.strftime("%Y-%m-%d"),
        "utterances": len(paths), "audio_seconds": round(seconds, 1),
        "repeats": args.repeats,
        "real_time_factor": {k: _summary(v) for k, v in rows.items()},
    }
    features = statistics.median(rows["features (mfcc+vad+cmn)"])
    result["features_over_step"] = {
        name: features / statistics.median(rows[f"train step {name}"])
        for name in ("tdnn_small", "tdnn")}
    print(f"{len(paths)} utterances, {seconds:.0f} s of audio, {args.repeats} repeats, CPU time "
          "of one thread per second of audio (median, min-max):")
    for name, values in rows.items():
        s = _summary(values)
        print(f"  {name:28s} {100 * s['median']:8.4f} %  ({100 * s['min']:.4f}-"
              f"{100 * s['max']:.4f})")
    for name, ratio in result["features_over_step"].items():
        print(f"  features / a training step of {name} on the same audio: {ratio:.4f}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
