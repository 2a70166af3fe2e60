"""The ``omniglot`` dataset read from its official layout ``<alphabet>/<character>/*.png``.

One class per character, named ``"<alphabet>/<character>"``, classes sorted by that name so the
standard split trains on the first half. The root may be the folder holding the alphabets, a
folder holding exactly one such folder (e.g. the unzipped ``images_background_small1/``), or a
``.zip`` of either, read in place. Images (black strokes on white, 105 × 105) are converted to one
channel, resized with antialiasing and inverted so strokes are bright, like ``glyphs``.
"""

from __future__ import annotations

import numpy as np
from PIL import Image
from PIL import ImageOps

from dmlsearch.trainables.data._layout import register_tree

__all__: list[str] = []

LAYOUT = (
    "a folder <alphabet>/<character>/*.png (one class per character), a folder holding exactly "
    "one such folder (e.g. images_background/), or a .zip of either"
)


@register_tree(
    "omniglot",
    description="Omniglot handwritten characters, one class per <alphabet>/<character>",
    layout=LAYOUT,
    depth=3,
    extensions=(".png",),
    mode="L",
    what="omniglot images",
)
def _omniglot_pixels(image: Image.Image, image_size: int) -> np.ndarray:
    size = (image_size, image_size)
    if image.size != size:
        image = image.resize(size, Image.Resampling.BILINEAR, reducing_gap=None)
    return np.asarray(ImageOps.invert(image), dtype=np.uint8)
