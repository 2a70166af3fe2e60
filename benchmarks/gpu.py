"""Benchmark: the fit loop on a GPU — precision, memory format, data feeding, and trial packing.

Every figure is a ratio to a baseline measured in the same run (SPEC: these machines are shared):

1. **train** — ResNet50 at 224 × 224, batch 100 (the thesis batch for ResNet50), MultiSimilarity
   with its miner, AdamW: images/s of :meth:`trainables.fit.Fitter.train_step` (the loop's own
   step: input convention, autocast, loss in fp32, loss scaling, optimizer) for fp32, fp32 +
   channels_last, bf16, bf16 + channels_last and fp16 + channels_last; ratio to fp32. Batches are
   already decoded (pinned host memory), so this is the model's ceiling. Also the relative
   difference of the first loss of each mode against fp32 on the same weights and batch.
2. **feed** — the loop's own epoch (:meth:`Fitter.train_epoch`, the second of two) on photo-like JPEGs (file-backed set, decoded and
   augmented with RandomResizedCrop 224 + flip in ``--workers`` processes), bf16 + channels_last,
   with the GPU's utilisation sampled through NVML every 50 ms; images/s against the same fit
   with the images already decoded in memory (the step's ceiling). Ratio near 1: the data side
   keeps up.
3. **pack** — 1, 2 and 4 small trials (ResNet18 at 112 × 112, batch 64, bf16) sharing the GPU as
   separate processes (what Ray's fractional ``gpus_per_trial`` does: it only schedules, every
   trial sees the whole device); total images/s over a common window, ratio to one trial.

    python benchmarks/gpu.py [--steps 30] [--feed-images 3000] [--workers 8] [--pack 1 2 4]
        [--out results.json]

About 4 minutes on one H100. Without a visible GPU it says so and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import torch  # noqa: E402

from dmlsearch.trainables.config import TrialConfig  # noqa: E402
from dmlsearch.trainables.data import ImageSet  # noqa: E402
from dmlsearch.trainables.data import TransformSpec  # noqa: E402
from dmlsearch.trainables.fit import Fitter  # noqa: E402

MODES = [  # (label, precision, channels_last)
    ("fp32", "fp32", False),
    ("fp32+cl", "fp32", True),
    ("bf16", "bf16", False),
    ("bf16+cl", "bf16", True),
    ("fp16+cl", "fp16", True),
]


def _config(**changes: Any) -> TrialConfig:
    base = {
        "backbone": "resnet50", "embedding_size": 512, "loss": "multi_similarity",
        "batch_size": 100, "m_per_class": 5, "lr": 1e-4, "device": "cuda", "epochs": 1,
        "workers": 0,
    }
    base.update(changes)
    return TrialConfig.from_flat(base)


def _random_set(count: int, size: int, classes: int, seed: int = 0) -> ImageSet:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (count, 3, size, size), dtype=torch.uint8, generator=g)
    return ImageSet(images=images, labels=np.arange(count) % classes,
                    class_names=tuple(str(c) for c in range(classes)))


def _timed_steps(fitter: Fitter, batch: tuple[torch.Tensor, torch.Tensor], steps: int) -> float:
    images, labels = batch
    fitter._set_train_mode()
    for _ in range(5):  # warm-up: cuDNN autotuning, allocator, lazy init
        fitter.train_step(images, labels)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        fitter.train_step(images, labels)
    torch.cuda.synchronize()
    return steps * images.shape[0] / (time.perf_counter() - started)


def bench_train(steps: int) -> list[dict[str, Any]]:
    torch.backends.cudnn.benchmark = True
    data = _random_set(100, 224, 20)
    batch = (data.images.pin_memory(), torch.from_numpy(data.labels))
    rows, first_losses = [], {}
    for label, precision, channels_last in MODES:
        fitter = Fitter(_config(precision=precision, channels_last=channels_last), data, None,
                        seed=0)
        fitter._set_train_mode()
        first_losses[label] = float(fitter.train_step(*batch))  # same weights and batch
        rate = _timed_steps(fitter, batch, steps)
        rows.append({"mode": label, "images_per_s": rate,
                     "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30})
        fitter.close()
        del fitter
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    base = rows[0]["images_per_s"]
    for row in rows:
        row["ratio_to_fp32"] = row["images_per_s"] / base
        ref = first_losses["fp32"]
        row["first_loss_rel_diff"] = abs(first_losses[row["mode"]] - ref) / abs(ref)
    return rows


class _Utilisation:
    """Samples the GPU's utilisation (NVML) in a thread while the ``with`` block runs."""

    def __init__(self, period: float = 0.05) -> None:
        self.period, self.samples = period, []
        self._stop = threading.Event()

    def __enter__(self) -> _Utilisation:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)

        def sample() -> None:
            while not self._stop.is_set():
                self.samples.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                time.sleep(self.period)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float:
        return float(statistics.mean(self.samples)) if self.samples else float("nan")


def _fit_epoch(cfg: TrialConfig, images: Any) -> dict[str, Any]:
    """Two epochs of the real loop; the second (workers up, cuDNN tuned) is measured."""
    fitter = Fitter(cfg, images, None, seed=0)
    try:
        fitter.train_epoch()
        torch.cuda.synchronize()
        with _Utilisation() as util:
            started = time.perf_counter()
            fitter.train_epoch()
            torch.cuda.synchronize()
            seconds = time.perf_counter() - started
    finally:
        fitter.close()
    return {"images": len(images), "seconds": seconds, "images_per_s": len(images) / seconds,
            "gpu_utilisation_mean_pct": util.mean}


def bench_feed(count: int, workers: int) -> list[dict[str, Any]]:
    from input_pipeline import make_tree

    torch.backends.cudnn.benchmark = True
    cfg = _config(precision="bf16", channels_last=True, workers=workers)
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        files = make_tree(Path(scratch) / "tree", count=count, width=400, height=300,
                          classes=40)
        files = files.with_transform(TransformSpec.for_size(224))
        made = time.perf_counter() - started
        from_files = _fit_epoch(cfg, files)
    in_memory = _fit_epoch(cfg.replace(workers=0), _random_set(count, 224, 40))
    from_files.update(source=f"JPEG 400x300, {workers} workers", jpeg_seconds=made)
    in_memory.update(source="decoded, in memory")
    from_files["ratio_to_in_memory"] = from_files["images_per_s"] / in_memory["images_per_s"]
    in_memory["ratio_to_in_memory"] = 1.0
    return [in_memory, from_files]


def _pack_worker(seconds: float, start: Any, out: Any) -> None:
    torch.backends.cudnn.benchmark = True
    data = _random_set(64, 112, 16)
    cfg = _config(backbone="resnet18", embedding_size=128, batch_size=64, m_per_class=4,
                  precision="bf16", channels_last=True)
    fitter = Fitter(cfg, data, None, seed=0)
    batch = (data.images.pin_memory(), torch.from_numpy(data.labels))
    fitter._set_train_mode()
    for _ in range(10):
        fitter.train_step(*batch)
    torch.cuda.synchronize()
    start.wait()  # every process starts its timed window together
    images, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        fitter.train_step(*batch)
        images += 64
    torch.cuda.synchronize()
    out.put(images / (time.perf_counter() - began))


def bench_pack(counts: list[int], seconds: float) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    rows = []
    for n in counts:
        start, out = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_pack_worker, args=(seconds, start, out)) for _ in range(n)]
        for p in procs:
            p.start()
        rates = [out.get(timeout=600) for _ in range(n)]
        for p in procs:
            p.join()
        rows.append({"trials": n, "total_images_per_s": sum(rates),
                     "per_trial_images_per_s": statistics.mean(rates)})
    for row in rows:
        row["ratio_to_one_trial"] = row["total_images_per_s"] / rows[0]["total_images_per_s"]
    return rows


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(0),
    }
    try:
        info["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["driver"] = "unknown (nvidia-smi failed)"
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per precision mode")
    parser.add_argument("--feed-images", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=8, help="decoding workers (feed)")
    parser.add_argument("--pack", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--pack-seconds", type=float, default=20.0)
    parser.add_argument("--sections", nargs="+", default=["train", "feed", "pack"],
                        choices=["train", "feed", "pack"])
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/gpu.py: no GPU is visible to torch; run it on a machine with one",
              file=sys.stderr)
        raise SystemExit(2)

    results: dict[str, Any] = {"machine": machine()}
    m = results["machine"]
    print(f"{m['gpu']} (driver, memory: {m['driver']}), torch {m['torch']}, CUDA {m['cuda']}, "
          f"cuDNN {m['cudnn']}, {m['cpus']} CPUs")
    if "train" in args.sections:
        results["train"] = bench_train(args.steps)
        print("\nResNet50 224x224, batch 100, MultiSimilarity + miner, AdamW (Fitter.train_step)")
        print(f"{'mode':9s} {'img/s':>8s} {'x fp32':>7s} {'peak GiB':>9s} {'loss rel.diff':>14s}")
        for r in results["train"]:
            print(f"{r['mode']:9s} {r['images_per_s']:8.0f} {r['ratio_to_fp32']:7.2f} "
                  f"{r['peak_memory_gib']:9.1f} {r['first_loss_rel_diff']:14.2e}")
    if "feed" in args.sections:
        results["feed"] = bench_feed(args.feed_images, args.workers)
        print("\nOne Fitter.run epoch, ResNet50 bf16+cl, batch 100")
        print(f"{'source':32s} {'img/s':>8s} {'x memory':>9s} {'GPU util %':>11s}")
        for r in results["feed"]:
            print(f"{r['source']:32s} {r['images_per_s']:8.0f} {r['ratio_to_in_memory']:9.2f} "
                  f"{r['gpu_utilisation_mean_pct']:11.0f}")
    if "pack" in args.sections:
        results["pack"] = bench_pack(args.pack, args.pack_seconds)
        print("\nSmall trials sharing the GPU (ResNet18 112x112, batch 64, bf16+cl)")
        print(f"{'trials':>6s} {'total img/s':>12s} {'per trial':>10s} {'x one':>6s}")
        for r in results["pack"]:
            print(f"{r['trials']:6d} {r['total_images_per_s']:12.0f} "
                  f"{r['per_trial_images_per_s']:10.0f} {r['ratio_to_one_trial']:6.2f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
