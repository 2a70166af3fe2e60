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

import numpy as np
from PIL import Image

from dmlsearch.trainables.data._layout import register_tree
from dmlsearch.trainables.data._tree import to_uint8

__all__ = ["MEMORY_BUDGET", "resize_center_crop"]

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


def _too_large(count: int, image_size: int) -> bool:
    """Whether ``count`` images decoded at ``image_size`` exceed :data:`MEMORY_BUDGET`."""
    return count * 3 * image_size * image_size > MEMORY_BUDGET


@register_tree(
    "folder",
    description="any class-per-folder image tree <class>/*.png|jpg|... (RGB)",
    layout=LAYOUT,
    depth=2,
    extensions=EXTENSIONS,
    mode="RGB",
    too_large=_too_large,
)
def _folder_pixels(image: Image.Image, image_size: int) -> np.ndarray:
    return to_uint8(resize_center_crop(image, image_size))
