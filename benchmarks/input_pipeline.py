"""Benchmark: the file-backed input pipeline — decode + transform throughput per worker count.

Generates a class-per-folder tree of JPEGs (default 500 images of 400 × 300 px, photo-like: smooth
colour fields plus fine noise, quality 90; about what a CUB or SOP photo costs to decode) and
pushes it through :class:`trainables.data.BatchLoader` (batches of 50) with 0, 1, 2 decoding
worker processes, for the training transform (RandomResizedCrop 224 + flip) and the evaluation
transform (Resize 256 + CenterCrop 224). Each (transform, workers) pair runs ``--epochs`` epochs
on one persistent loader; the table gives images/s of the first epoch (worker start-up included)
and the median of the later ones (steady state). Nothing touches a model: this is the ceiling the
data side puts on training speed.

    python benchmarks/input_pipeline.py [--images 500] [--size 224] [--workers 0 1 2]
        [--epochs 3] [--batch 50] [--dir DIR] [--out results.json]

The default run takes about a minute on 2 CPU cores.
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

from trainables.data import BatchLoader, FileImageSet, TransformSpec  # noqa: E402

CLASSES = 10


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
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--width", type=int, default=400)
    parser.add_argument("--height", type=int, default=300)
    parser.add_argument("--size", type=int, default=224, help="crop size")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--dir", type=Path, default=None, help="where the JPEGs go (kept)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        top = args.dir or Path(scratch) / "tree"
        started = time.perf_counter()
        images = make_tree(top, count=args.images, width=args.width, height=args.height)
        images = images.with_transform(TransformSpec.for_size(args.size))
        size_mb = sum(os.path.getsize(top / f) for f in images.files) / 2**20
        print(f"{args.images} JPEGs {args.width}x{args.height} ({size_mb:.1f} MiB) ready in "
              f"{time.perf_counter() - started:.1f}s; crops {args.size}, batches of {args.batch}")
        results = [
            run(images, train=train, workers=w, epochs=args.epochs, batch=args.batch)
            for train in (True, False) for w in args.workers
        ]

    machine = {
        "cpus": os.cpu_count(), "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(), "torch": torch.__version__,
        "load_average": os.getloadavg(),
    }
    print(f"\nmachine: {machine['cpus']} CPUs, {machine['platform']}, torch {machine['torch']},"
          f" load {machine['load_average'][0]:.2f}")
    print(f"{'transform':10s} {'workers':>7s} {'first epoch img/s':>18s} {'steady img/s':>13s}")
    for r in results:
        print(f"{r['transform']:10s} {r['workers']:7d} {r['first_epoch_images_per_s']:18.0f} "
              f"{r['steady_images_per_s']:13.0f}")
    if args.out:
        args.out.write_text(json.dumps({"machine": machine, "args": {
            k: str(v) for k, v in vars(args).items()}, "results": results}, indent=2))


if __name__ == "__main__":
    main()
