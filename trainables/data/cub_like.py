"""A CUB-200-2011-shaped tree of photo-like JPEGs, written without downloading anything.

For tests and benchmarks of the file-backed pipeline at full scale (the reader, the decoded
store, device augmentation): :func:`write_cub_like` writes ``CUB_200_2011/`` in the official
layout that the ``cub200`` dataset reads (``images.txt``, ``image_class_labels.txt``,
``classes.txt``, ``train_test_split.txt``, ``images/<NNN.Class_name>/<Class_name_NNNN>.jpg``),
by default at CUB's size: 200 classes, 11,788 JPEGs of about 500 x 375 (landscape and portrait),
quality 75-95, a few stored sideways with an EXIF orientation tag as cameras write them.

The pixels are photographs that Python packages already ship (scikit-learn's ``china.jpg`` and
``flower.jpg``, matplotlib's ``grace_hopper.jpg`` and ``Minduka_Present_Blue_Pack.png``): each
class is a region of one of them under a colour transform of its own (a channel mix and a
gamma), and each image a jittered view of its class's region (shift, zoom, aspect, mirror,
brightness, contrast, blur, sensor noise). Classes are therefore learnable but not trivially, as
real fine-grained classes are. Deterministic for a given ``seed``.

    python -m dmlsearch.trainables.data.cub_like DIR [--classes 200] [--images 11788]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image
from PIL import ImageFilter

__all__ = ["CUB_CLASSES", "CUB_IMAGES", "write_cub_like"]

CUB_CLASSES = 200
CUB_IMAGES = 11_788
_ORIENTATION = 0x0112


def _photo_paths() -> list[str]:
    import matplotlib
    import sklearn

    images = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images")
    samples = os.path.join(matplotlib.get_data_path(), "sample_data")
    return [os.path.join(images, "china.jpg"), os.path.join(images, "flower.jpg"),
            os.path.join(samples, "grace_hopper.jpg"),
            os.path.join(samples, "Minduka_Present_Blue_Pack.png")]


@lru_cache(maxsize=None)
def _photo(index: int) -> np.ndarray:
    with Image.open(_photo_paths()[index]) as image:
        return np.asarray(image.convert("RGB"), dtype=np.float32)


def _counts(classes: int, images: int) -> list[int]:
    """Images per class: as even as possible, the extra ones to the first classes."""
    base, extra = divmod(images, classes)
    return [base + (c < extra) for c in range(classes)]


def _class_look(seed: int, c: int) -> dict[str, object]:
    rng = np.random.default_rng((seed, c, 1))
    photo = c % len(_photo_paths())
    height, width = _photo(photo).shape[:2]
    zoom = rng.uniform(0.35, 0.8)  # the class's region: a fraction of the photo
    mix = np.eye(3) * rng.uniform(0.6, 1.0) + rng.uniform(-0.25, 0.45, size=(3, 3))
    return {
        "photo": photo,
        "centre": (rng.uniform(0.3, 0.7) * height, rng.uniform(0.3, 0.7) * width),
        "zoom": zoom,
        "mix": mix / mix.sum(axis=1, keepdims=True).clip(0.5, None),
        "gamma": rng.uniform(0.7, 1.4),
    }


@lru_cache(maxsize=8)
def _template(seed: int, c: int) -> Image.Image:
    """The class's photo under its colour transform (made once per class)."""
    look = _class_look(seed, c)
    pixels = _photo(int(look["photo"])) / 255.0
    pixels = np.clip(pixels @ np.asarray(look["mix"]).T, 0, 1) ** float(look["gamma"])
    return Image.fromarray((pixels * 255).round().astype(np.uint8))


def _render(seed: int, c: int, k: int) -> tuple[Image.Image, int]:
    """Image ``k`` of class ``c`` and its EXIF orientation (1: upright)."""
    look = _class_look(seed, c)
    rng = np.random.default_rng((seed, c, k, 2))
    template = _template(seed, c)
    width, height = template.size
    portrait = rng.random() < 0.25
    out_w, out_h = (375, 500) if portrait else (500, 375)
    out_w, out_h = int(out_w * rng.uniform(0.85, 1.0)), int(out_h * rng.uniform(0.85, 1.0))
    side = float(look["zoom"]) * min(height, width) * rng.uniform(0.8, 1.2)
    crop_h, crop_w = side, side * out_w / out_h
    crop_h, crop_w = min(crop_h, height), min(crop_w, width)
    cy, cx = look["centre"]
    cy = float(np.clip(cy + rng.normal(0, 0.08) * height, crop_h / 2, height - crop_h / 2))
    cx = float(np.clip(cx + rng.normal(0, 0.08) * width, crop_w / 2, width - crop_w / 2))
    box = (cx - crop_w / 2, cy - crop_h / 2, cx + crop_w / 2, cy + crop_h / 2)
    region = template.resize((out_w, out_h), Image.BILINEAR, box=box)
    pixels = np.asarray(region, dtype=np.float32)
    contrast, brightness = rng.uniform(0.75, 1.25), rng.normal(0, 0.06) * 255
    pixels = (pixels - 127.5) * contrast + 127.5 + brightness
    noise = rng.standard_normal(size=pixels.shape, dtype=np.float32)
    pixels += noise * np.float32(rng.uniform(0.005, 0.03) * 255)
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    if rng.random() < 0.3:
        image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.2)))
    orientation = 1
    if rng.random() < 0.02:  # stored sideways, as a camera held upright writes it
        image, orientation = image.transpose(Image.ROTATE_90), 6
    return image, orientation


def _class_name(c: int) -> str:
    return f"{c + 1:03d}.Synthetic_class_{c + 1:03d}"


def _write_class(job: tuple[str, int, int, int, int]) -> None:
    top, seed, c, start, count = job
    folder = Path(top) / "images" / _class_name(c)
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(count):
        image, orientation = _render(seed, c, k)
        exif = Image.Exif()
        if orientation != 1:
            exif[_ORIENTATION] = orientation
        quality = int(np.random.default_rng((seed, c, k, 3)).integers(75, 96))
        name = f"Synthetic_Class_{c + 1:03d}_{start + k + 1:04d}_{k + 1}.jpg"
        image.save(folder / name, quality=quality, exif=exif)


def write_cub_like(root: str | os.PathLike, *, classes: int = CUB_CLASSES,
                   images: int = CUB_IMAGES, seed: int = 0, workers: int = 1) -> Path:
    """Write ``root/CUB_200_2011`` (see the module's notes) and return that folder.

    ``workers`` processes render the classes in parallel (the output does not depend on it).
    """
    if classes < 2 or images < 2 * classes:
        raise ValueError(f"need at least 2 classes and 2 images per class, got {classes} "
                         f"classes and {images} images")
    top = Path(root) / "CUB_200_2011"
    top.mkdir(parents=True, exist_ok=True)
    counts = _counts(classes, images)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
    jobs = [(str(top), seed, c, int(starts[c]), counts[c]) for c in range(classes)]
    if workers > 1:
        context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        with context.Pool(workers) as pool:
            pool.map(_write_class, jobs, chunksize=1)
    else:
        for job in jobs:
            _write_class(job)
    rows, labels, split = [], [], []
    image_id = 0
    for c in range(classes):
        for k in range(counts[c]):
            image_id += 1
            name = f"Synthetic_Class_{c + 1:03d}_{starts[c] + k + 1:04d}_{k + 1}.jpg"
            rows.append(f"{image_id} {_class_name(c)}/{name}")
            labels.append(f"{image_id} {c + 1}")
            split.append(f"{image_id} {int(k % 2 == 0)}")
    (top / "images.txt").write_text("\n".join(rows) + "\n")
    (top / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (top / "train_test_split.txt").write_text("\n".join(split) + "\n")
    (top / "classes.txt").write_text(
        "\n".join(f"{c + 1} {_class_name(c)}" for c in range(classes)) + "\n")
    return top


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="folder to write CUB_200_2011/ into")
    parser.add_argument("--classes", type=int, default=CUB_CLASSES)
    parser.add_argument("--images", type=int, default=CUB_IMAGES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    top = write_cub_like(args.root, classes=args.classes, images=args.images, seed=args.seed,
                         workers=args.workers)
    print(f"wrote {args.images} JPEGs of {args.classes} classes to {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
