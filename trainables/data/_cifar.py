"""The ``cifar10`` dataset read from the official python pickles, held in memory.

``cifar-10-batches-py/`` holds ``data_batch_1`` … ``data_batch_5``, ``test_batch`` and
``batches.meta``; the root may be that folder or the folder holding it. Each batch is a pickled
dict with ``b"data"`` (uint8 ``[N, 3072]``: the red, green and blue 32 × 32 planes, row-major) and
``b"labels"`` (``N`` ints 0–9); ``batches.meta`` names the classes (``b"label_names"``). The
pickles are read with an unpickler that only admits NumPy arrays and plain values, so a tampered
file cannot run code.

All 60,000 images are kept, in file order: the 50,000 of ``data_batch_1..5`` first, then the 10,000
of ``test_batch`` (a closed-set protocol can take ``subset(range(50000))`` as its training images).
The class-disjoint split used for retrieval and verification here is the standard one (the first
half of the classes train, as for CUB200 in Psomas 2020 §3.1): classes 0–4 (airplane, automobile,
bird, cat, deer) train, 5–9 (dog, frog, horse, ship, truck) test. At an ``image_size`` other than
32 the images are resized once, in memory (bilinear, antialiased).
"""

from __future__ import annotations

import logging
import os
import pickle
from typing import Any

import numpy as np
import torch

from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._imageset import ImageSet
from dmlsearch.trainables.data._layout import register_layout
from dmlsearch.trainables.errors import UserError

__all__: list[str] = []

logger = logging.getLogger(__name__)

NAME = "cifar10"
BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
REQUIRED = BATCHES + ("batches.meta",)
LAYOUT = (
    "the cifar-10-batches-py folder (or the folder holding it) with the python pickles "
    "data_batch_1 ... data_batch_5, test_batch and batches.meta"
)
NATIVE_SIZE = 32
#: Resized copies larger than this are refused (60,000 images at 224 px would take 9 GB).
MAX_BYTES = 4 << 30

_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"): ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"): ("numpy._core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"): ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"): ("numpy", "ndarray"),
    ("numpy", "dtype"): ("numpy", "dtype"),
    ("_codecs", "encode"): ("_codecs", "encode"),
}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, strings, numbers and NumPy arrays; refuses every other class."""

    def find_class(self, module: str, name: str) -> Any:
        target = _ALLOWED.get((module, name))
        if target is None:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(*target)


def _load(path: str) -> dict[bytes, Any]:
    try:
        with open(path, "rb") as handle:
            content = _ArrayUnpickler(handle, encoding="bytes").load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError,
            AttributeError, ImportError, IndexError) as exc:
        raise UserError(
            f"{NAME}: cannot read {path} as a CIFAR-10 python pickle ({exc}): restore the file"
        ) from None
    if not isinstance(content, dict):
        raise UserError(f"{NAME}: {path} does not hold a dict: restore the original file")
    return content


def _batch(path: str) -> tuple[np.ndarray, np.ndarray]:
    content = _load(path)
    data, labels = content.get(b"data"), content.get(b"labels")
    if data is None or labels is None:
        raise UserError(f"{NAME}: {path} lacks b'data' or b'labels': restore the original file")
    data = np.asarray(data)
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or \
            data.shape[0] != labels.shape[0]:
        raise UserError(
            f"{NAME}: {path} should hold uint8 data [N, 3072] and N labels, got {data.dtype} "
            f"{data.shape} and {labels.shape[0]} labels: restore the original file"
        )
    return data.reshape(-1, 3, 32, 32), labels


def _resize(images: np.ndarray, size: int) -> torch.Tensor:
    count = images.shape[0]
    if count * 3 * size * size > MAX_BYTES:
        raise UserError(
            f"{NAME}: {count} images at {size} px would take {count * 3 * size * size / 2**30:.1f}"
            f" GiB in memory; use image_size <= "
            f"{int((MAX_BYTES / (3 * count)) ** 0.5)} (native: {NATIVE_SIZE})"
        )
    out = torch.empty((count, 3, size, size), dtype=torch.uint8)
    for i in range(0, count, 2048):
        chunk = torch.from_numpy(images[i : i + 2048]).float()
        resized = torch.nn.functional.interpolate(
            chunk, size=(size, size), mode="bilinear", align_corners=False, antialias=True
        )
        out[i : i + 2048] = resized.round_().clamp_(0, 255).to(torch.uint8)
    return out


@register_layout(
    NAME,
    description="CIFAR-10 (python pickles): 10 classes, 60,000 images 32x32, in memory "
    "(classes 0-4 train)",
    layout=LAYOUT,
    required=REQUIRED,
    folder="cifar-10-batches-py",
    image_size=NATIVE_SIZE,
)
def read_cifar10(top: str, image_size: int) -> Dataset:
    parts = [_batch(os.path.join(top, name)) for name in BATCHES]
    meta_path = os.path.join(top, "batches.meta")
    names = _load(meta_path).get(b"label_names")
    if not isinstance(names, list) or not names:
        raise UserError(f"{NAME}: {meta_path} lacks b'label_names': restore the original file")
    class_names = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)
    pixels = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    if labels.size and (labels.min() < 0 or labels.max() >= len(class_names)):
        raise UserError(
            f"{NAME}: labels {labels.min()}..{labels.max()} do not fit the "
            f"{len(class_names)} classes of {meta_path}: restore the original files"
        )
    images = (
        torch.from_numpy(np.ascontiguousarray(pixels))
        if image_size == NATIVE_SIZE else _resize(pixels, image_size)
    )
    logger.info("cifar10: %d images of %d classes from %s", len(labels), len(class_names), top)
    return Dataset.with_standard_split(
        name=NAME, images=ImageSet(images=images, labels=labels, class_names=class_names)
    )
