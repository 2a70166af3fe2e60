"""Benchmark: the input pipeline — decode + augmentation throughput per core against what the
model consumes, and whether the fit loop waits on data (issue #8, item 4).

Three sections, all in one run:

1. **decode** — a class-per-folder tree of JPEGs (default 500 images of 400 × 300 px, photo-like:
   smooth colour fields plus fine noise, quality 90; about what a CUB or SOP photo costs to
   decode) pushed through :class:`trainables.data.BatchLoader` (batches of 50) with 0, 1, 2
   decoding worker processes, for the training transform (RandomResizedCrop 224 + flip) and the
   evaluation transform (Resize 256 + CenterCrop 224). Each (transform, workers) pair runs
   ``--epochs`` epochs on one persistent loader: images/s of the first epoch (worker start-up
   included), the median of the later ones (steady state), and that per decoding process
   (``workers``, or 1 for ``workers=0``: the loop's own process). Nothing touches a model.
2. **consume** — images/s of :meth:`trainables.fit.Fitter.train_step` (forward, loss, backward,
   AdamW) on a batch already decoded in memory, for the quick start's model (``smallcnn``, 32 ×
   32 grey, batch 64) and a photo backbone (``resnet18`` at 224, batch 16), with one torch
   thread (one core, what a trial reserving one CPU gets; on a shared 2-core machine two torch
   threads stall whenever another process holds a core); and how many decoding processes each
   would need (its img/s ÷ the training transform's img/s per process at 224).
3. **fit loop** — :meth:`Fitter.train_epoch` (sampler, loader, step) on the JPEGs with 0, 1, 2
   workers, each model at its own input size (``smallcnn``: 500 JPEGs cropped to 32 px grey;
   ``resnet18``: 64 JPEGs at 224), the median of 2 epochs after a warm-up one: images/s, its
   ratio to the same epochs on images already decoded in memory, and the share of the epoch
   the loop spent waiting for its next batch (``Fitter.data_wait_seconds`` /
   ``Fitter.train_seconds``, measured by the fit loop itself).

    python benchmarks/input_pipeline.py [--images 500] [--size 224] [--workers 0 1 2]
        [--epochs 3] [--batch 50] [--models smallcnn resnet18]
        [--dir DIR] [--out results.json] [--small]

The default run takes about 3 minutes on 2 CPU cores; ``--small`` under a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from PIL import Image  # noqa: E402

from dmlsearch.trainables.config import TrialConfig  # noqa: E402
from dmlsearch.trainables.data import BatchLoader  # noqa: E402
from dmlsearch.trainables.data import FileImageSet  # noqa: E402
from dmlsearch.trainables.data import ImageSet  # noqa: E402
from dmlsearch.trainables.data import TransformSpec  # noqa: E402
from dmlsearch.trainables.fit import Fitter  # noqa: E402
from dmlsearch.trainables.sampling import make_batches  # noqa: E402

CLASSES = 10
# (backbone, input side, channels, batch): the quick start's model and a photo backbone.
# (backbone, input side, channels, batch, JPEGs of the fit-loop section): the quick start's
# model (here also fed from photos, at its own 32 px) and a photo backbone.
MODELS = {"smallcnn": ("smallcnn", 32, 1, 64, 500), "resnet18": ("resnet18", 224, 3, 16, 64)}
THREADS = 1  # torch threads of the model: one core, as a trial with --cpus-per-trial 1 gets


def make_tree(
    top: Path, *, count: int, width: int, height: int, seed: int = 0, classes: int = CLASSES
) -> FileImageSet:
    """``count`` photo-like JPEGs in ``classes`` folders under ``top`` (reused when present)."""
    rng = np.random.default_rng(seed)
    files, labels = [], []
    for i in range(count):
        label = i % classes
        rel = f"class{label:02d}/{i:05d}.jpg"
        path = top / rel
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            coarse = rng.integers(0, 256, (height // 25 + 1, width // 25 + 1, 3), dtype=np.uint8)
            smooth = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
            noise = rng.normal(0, 12, (height, width, 3))
            pixels = np.clip(np.asarray(smooth, dtype=np.float32) + noise, 0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(path, quality=90)
        files.append(rel)
        labels.append(label)
    return FileImageSet(
        root=str(top), files=np.asarray(files, dtype=object), labels=np.asarray(labels),
        class_names=tuple(f"class{c:02d}" for c in range(classes)),
        transform=TransformSpec.for_size(224), dataset="bench",
    )


def run(images: FileImageSet, *, train: bool, workers: int, epochs: int, batch: int) -> dict:
    rng = np.random.default_rng(1)
    seconds = []
    with BatchLoader(images, train=train, workers=workers, seed=0) as loader:
        for _ in range(epochs):
            order = rng.permutation(len(images))
            batches = [order[i : i + batch] for i in range(0, len(order), batch)]
            started = time.perf_counter()
            count = sum(x.shape[0] for x, _ in loader.epoch(batches))
            seconds.append(time.perf_counter() - started)
    assert count == len(images)
    steady = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
    return {
        "transform": "train" if train else "eval",
        "workers": workers,
        "first_epoch_images_per_s": len(images) / seconds[0],
        "steady_images_per_s": len(images) / steady,
        "epoch_seconds": seconds,
        "processes": max(1, workers),
        "steady_images_per_s_per_process": len(images) / steady / max(1, workers),
    }


def _config(backbone: str, batch: int, **changes: object) -> TrialConfig:
    return TrialConfig.from_flat({
        "backbone": backbone, "embedding_size": 128, "loss": "multi_similarity",
        "batch_size": batch, "m_per_class": batch // 8, "lr": 1e-4,  # 8 classes a batch
        "device": "cpu", "epochs": 1, "threads": THREADS, **changes})


def _random_set(count: int, size: int, channels: int, classes: int = CLASSES) -> ImageSet:
    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (count, channels, size, size), dtype=torch.uint8, generator=g)
    return ImageSet(images=pixels, labels=np.arange(count) % classes,
                    class_names=tuple(str(c) for c in range(classes)))


def consume(name: str, *, steps: int) -> dict:
    """Images/s of the fit loop's own step on a batch already decoded (the model's appetite)."""
    backbone, size, channels, batch, _ = MODELS[name]
    data = _random_set(batch, size, channels)
    fitter = Fitter(_config(backbone, batch), data, None, seed=0)
    images, labels = data.images, torch.from_numpy(data.labels)
    fitter.begin_epoch()
    for _ in range(2):  # warm-up: allocator, lazy init
        fitter.train_step(images, labels)
    started = time.perf_counter()
    for _ in range(steps):
        fitter.train_step(images, labels)
    seconds = time.perf_counter() - started
    fitter.close()
    return {"model": name, "backbone": backbone, "size": size, "channels": channels,
            "batch": batch, "steps": steps, "images_per_s": steps * batch / seconds,
            "torch_threads": torch.get_num_threads()}


def fit_epoch(name: str, images: object, *, workers: int, timed: int = 2) -> dict:
    """:meth:`Fitter.train_epoch` after one warm-up epoch: the median of ``timed`` epochs'
    images/s, and the share of those epochs the loop spent waiting for its next batch."""
    backbone, _, _, batch, _ = MODELS[name]
    fitter = Fitter(_config(backbone, batch, workers=workers), images, None, seed=0)
    cfg = fitter.cfg
    trained = sum(len(b) for b in make_batches(cfg.batch_sampler, fitter.train.labels,
                                               batch_size=cfg.batch_size, m=cfg.m_per_class,
                                               rng=np.random.default_rng(0)))
    seconds, waits = [], []
    try:
        fitter.train_epoch()
        for _ in range(timed):
            started = time.perf_counter()
            fitter.train_epoch()
            seconds.append(time.perf_counter() - started)
            waits.append(fitter.data_wait_seconds / fitter.train_seconds)
    finally:
        fitter.close()
    return {"model": name, "workers": workers, "epoch_seconds": seconds,
            "images_per_s": trained / statistics.median(seconds),
            "data_wait_share": statistics.median(waits), "data_wait_shares": waits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--width", type=int, default=400)
    parser.add_argument("--height", type=int, default=300)
    parser.add_argument("--size", type=int, default=224, help="crop size")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps of the consume section (default: 30 smallcnn, "
                             "5 resnet18)")
    parser.add_argument("--small", action="store_true",
                        help="smoke test: 150 images, 2 epochs, 1 timed resnet18 step")
    parser.add_argument("--dir", type=Path, default=None, help="where the JPEGs go (kept)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()
    if args.small:
        args.images, args.epochs = 150, 2
    load_start = os.getloadavg()
    started_all = time.perf_counter()

    with tempfile.TemporaryDirectory() as scratch:
        top = args.dir or Path(scratch) / "tree"
        started = time.perf_counter()
        images = make_tree(top, count=args.images, width=args.width, height=args.height)
        images = images.with_transform(TransformSpec.for_size(args.size))
        size_mb = sum(os.path.getsize(top / f) for f in images.files) / 2**20
        print(f"{args.images} JPEGs {args.width}x{args.height} ({size_mb:.1f} MiB) ready in "
              f"{time.perf_counter() - started:.1f}s; crops {args.size}, batches of {args.batch}",
              flush=True)
        results = [
            run(images, train=train, workers=w, epochs=args.epochs, batch=args.batch)
            for train in (True, False) for w in args.workers
        ]
        appetite = []
        for name in args.models:
            steps = args.steps or (1 if args.small and name == "resnet18" else
                                   30 if name == "smallcnn" else 5)
            appetite.append(consume(name, steps=steps))
            print(f"consume {name}: {appetite[-1]['images_per_s']:.0f} img/s", flush=True)
        # The fit loop on the JPEGs, each model at its own input size; against the same images
        # already decoded in memory. workers=0 decodes in the loop's own process (one core).
        loops = []
        for name in args.models:
            backbone, size, channels, batch, count = MODELS[name]
            count = min(count if not args.small else batch * 3, len(images))
            files = images.subset(np.arange(count)).with_transform(
                TransformSpec.for_size(size, channels=channels))
            row = fit_epoch(name, _random_set(count, size, channels), workers=0)
            row.update(source=f"decoded, in memory ({count} images, {size} px)", images=count)
            loops.append(row)
            for w in args.workers:
                row = fit_epoch(name, files, workers=w)
                row.update(source=f"JPEG, {w} workers", images=count)
                loops.append(row)
                print(f"fit loop {name} {w} workers: {row['images_per_s']:.0f} img/s, data wait "
                      f"{row['data_wait_share']:.0%}", flush=True)

    machine = {
        "cpus": os.cpu_count(), "platform": platform.platform(),
        "processor": _cpu_model(),
        "python": platform.python_version(), "torch": torch.__version__,
        "load_average_start": load_start, "load_average_end": os.getloadavg(),
    }
    train_per_process = {r["workers"]: r["steady_images_per_s_per_process"]
                         for r in results if r["transform"] == "train"}
    per_core = max(train_per_process.values())
    for a in appetite:
        a["decode_processes_needed"] = a["images_per_s"] / per_core
    for row in loops:
        memory = next(r for r in loops if r["model"] == row["model"]
                      and r["source"].startswith("decoded"))
        row["ratio_to_in_memory"] = row["images_per_s"] / memory["images_per_s"]

    print(f"\nmachine: {machine['cpus']} CPUs ({machine['processor']}), {machine['platform']}, "
          f"torch {machine['torch']}, load {load_start[0]:.2f} at the start, "
          f"{machine['load_average_end'][0]:.2f} at the end")
    print("\n1. decode + augmentation (no model)\n")
    print("| transform | workers | first epoch img/s | steady img/s | steady img/s per process |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['transform']} | {r['workers']} | {r['first_epoch_images_per_s']:.0f} | "
              f"{r['steady_images_per_s']:.0f} | {r['steady_images_per_s_per_process']:.0f} |")
    print(f"\n2. what the model consumes (train_step on decoded batches, {THREADS} torch "
          "thread)\n")
    print("| model | input | batch | img/s (one core) | decoding processes it needs |")
    print("|---|---|---|---|---|")
    for a in appetite:
        print(f"| {a['model']} | {a['channels']}×{a['size']}² | {a['batch']} | "
              f"{a['images_per_s']:.0f} | {a['decode_processes_needed']:.2f} |")
    print(f"\n3. the fit loop on the JPEGs, {THREADS} torch thread (median of 2 epochs after a "
          "warm-up)\n")
    print("| model | source | img/s | × in memory | waiting for data |")
    print("|---|---|---|---|---|")
    for r in loops:
        print(f"| {r['model']} | {r['source']} | {r['images_per_s']:.1f} | "
              f"{r['ratio_to_in_memory']:.2f} | {r['data_wait_share']:.0%} |")
    print(f"\nwall time {time.perf_counter() - started_all:.0f} s")
    if args.out:
        args.out.write_text(json.dumps({"machine": machine, "args": {
            k: str(v) for k, v in vars(args).items()}, "decode": results, "consume": appetite,
            "fit_loop": loops}, indent=2))


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() \
            else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
