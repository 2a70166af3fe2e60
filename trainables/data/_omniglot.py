"""The ``omniglot`` dataset read from its official layout ``<alphabet>/<character>/*.png``.

One class per character, named ``"<alphabet>/<character>"``, classes sorted by that name so the
standard split trains on the first half. The root may be the folder holding the alphabets, a
folder holding exactly one such folder (e.g. the unzipped ``images_background_small1/``), or a
``.zip`` of either, read in place. Images (black strokes on white, 105 × 105) are converted to one
channel, resized with antialiasing and inverted so strokes are bright, like ``glyphs``.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch
from PIL import Image
from PIL import ImageOps

from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._imageset import ImageSet
from dmlsearch.trainables.data._registry import register_dataset
from dmlsearch.trainables.data._tree import open_tree
from dmlsearch.trainables.data._tree import read_image

__all__: list[str] = []

logger = logging.getLogger(__name__)

LAYOUT = (
    "a folder <alphabet>/<character>/*.png (one class per character), a folder holding exactly "
    "one such folder (e.g. images_background/), or a .zip of either"
)


@register_dataset(
    "omniglot",
    description="Omniglot handwritten characters, one class per <alphabet>/<character>",
    needs_root=True,
    layout=LAYOUT,
)
def _build_omniglot(*, root: str | None, image_size: int, seed: int) -> Dataset:
    del seed  # reading files is deterministic
    assert root is not None, "the registry checks that a root is given"
    started = time.perf_counter()
    size = (image_size, image_size)
    with open_tree(root, depth=3, extensions=(".png",), dataset="omniglot", layout=LAYOUT) as tree:
        class_names = tuple(sorted(tree.classes))
        count = sum(len(keys) for keys in tree.classes.values())
        images = np.empty((count, 1, image_size, image_size), dtype=np.uint8)
        labels = np.empty(count, dtype=np.int64)
        i = 0
        for label, name in enumerate(class_names):
            for key in tree.classes[name]:
                image = read_image(tree, key, mode="L", dataset="omniglot")
                if image.size != size:
                    image = image.resize(size, Image.Resampling.BILINEAR, reducing_gap=None)
                images[i, 0] = np.asarray(ImageOps.invert(image), dtype=np.uint8)
                labels[i] = label
                i += 1
    logger.info(
        "read %d omniglot images of %d classes from %s in %.1fs",
        count, len(class_names), root, time.perf_counter() - started,
    )
    return Dataset.with_standard_split(
        name="omniglot",
        images=ImageSet(images=torch.from_numpy(images), labels=labels, class_names=class_names),
    )
