"""The ``folder`` dataset: a generic class-per-folder tree ``<class>/*.{png,jpg,jpeg,bmp,webp}``.

Classes are the folder names, sorted, so the standard split trains on the first half. The root
may also be a folder holding exactly one such tree, or a ``.zip`` of either (read in place).
Images are read as RGB (EXIF orientation applied). How they are held depends on the tree's size:

* **in memory** when the decoded images fit in :data:`MEMORY_BUDGET` bytes at ``image_size``
  (e.g. up to 350,000 images at 32 px, 7,000 at 224 px): each image is decoded once, its shorter
  side resized with antialiasing to ``image_size`` and the centre cropped to a square, as
  torchvision's ``Resize`` + ``CenterCrop`` do; no augmentation;
* **file-backed** (a :class:`~trainables.data.FileImageSet`) above that: files are decoded per
  batch with the standard photo transforms of crop size ``image_size`` (training
  RandomResizedCrop + flip, evaluation Resize(round(size·256/224)) + CenterCrop), like CUB or SOP.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import torch
from PIL import Image

from dmlsearch.trainables.data._fileset import FileImageSet
from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._imageset import ImageSet
from dmlsearch.trainables.data._registry import register_dataset
from dmlsearch.trainables.data._transforms import TransformSpec
from dmlsearch.trainables.data._tree import open_tree
from dmlsearch.trainables.data._tree import read_image
from dmlsearch.trainables.data._tree import to_uint8

__all__ = ["MEMORY_BUDGET", "resize_center_crop"]

logger = logging.getLogger(__name__)

#: A tree whose decoded pixels (N · 3 · size²) exceed this many bytes is read lazily from files.
MEMORY_BUDGET = 1 << 30
EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
LAYOUT = (
    "a folder <class>/*.{png,jpg,jpeg,bmp,webp} (one sub-folder per class), a folder holding "
    "exactly one such folder, or a .zip of either"
)


def resize_center_crop(image: Image.Image, size: int) -> Image.Image:
    """Shorter side to ``size`` (antialiased), then the central ``size`` × ``size`` square."""
    width, height = image.size
    scale = size / min(width, height)
    new = (max(size, round(width * scale)), max(size, round(height * scale)))
    if new != image.size:
        image = image.resize(new, Image.Resampling.BILINEAR, reducing_gap=None)
    left, top = (new[0] - size) // 2, (new[1] - size) // 2
    return image.crop((left, top, left + size, top + size))


@register_dataset(
    "folder",
    description="any class-per-folder image tree <class>/*.png|jpg|... (RGB)",
    needs_root=True,
    layout=LAYOUT,
)
def _build_folder(*, root: str | None, image_size: int, seed: int) -> Dataset:
    del seed  # reading files is deterministic
    assert root is not None, "the registry checks that a root is given"
    started = time.perf_counter()
    with open_tree(root, depth=2, extensions=EXTENSIONS, dataset="folder", layout=LAYOUT) as tree:
        class_names = tuple(sorted(tree.classes))
        count = sum(len(keys) for keys in tree.classes.values())
        if count * 3 * image_size * image_size > MEMORY_BUDGET:
            files = [key for name in class_names for key in tree.classes[name]]
            labels = np.repeat(np.arange(len(class_names)),
                               [len(tree.classes[name]) for name in class_names])
            logger.info(
                "folder: %d images of %d classes at %d px exceed the in-memory budget: reading "
                "them from %s per batch", count, len(class_names), image_size, root,
            )
            return Dataset.with_standard_split(name="folder", images=FileImageSet(
                root=root, files=np.asarray(files, dtype=object), labels=labels,
                class_names=class_names, transform=TransformSpec.for_size(image_size),
                archive=not os.path.isdir(root), dataset="folder",
            ))
        images = np.empty((count, 3, image_size, image_size), dtype=np.uint8)
        labels = np.empty(count, dtype=np.int64)
        i = 0
        for label, name in enumerate(class_names):
            for key in tree.classes[name]:
                image = read_image(tree, key, mode="RGB", dataset="folder")
                images[i] = to_uint8(resize_center_crop(image, image_size))
                labels[i] = label
                i += 1
    logger.info(
        "read %d images of %d classes from %s in %.1fs",
        count, len(class_names), root, time.perf_counter() - started,
    )
    return Dataset.with_standard_split(
        name="folder",
        images=ImageSet(images=torch.from_numpy(images), labels=labels, class_names=class_names),
    )
