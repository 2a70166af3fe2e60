"""Datasets as in-memory labelled images, built by name from a registry.

``load_dataset("glyphs")`` needs no files (characters drawn from matplotlib's fonts, cached after
the first build); ``omniglot`` and ``folder`` read a folder or ``.zip`` given as ``root``
(``--data-root DIR`` on the command line). Every :class:`Dataset` carries the standard split of
SPEC §3: the first half of its classes (sorted by name) train, the second half test.
"""

from __future__ import annotations

from trainables.data import _folder as _folder  # noqa: F401  (registers "folder")
from trainables.data import _glyphs as _glyphs  # noqa: F401  (registers "glyphs")
from trainables.data import _omniglot as _omniglot  # noqa: F401  (registers "omniglot")
from trainables.data._imageset import Dataset
from trainables.data._imageset import ImageSet
from trainables.data._imageset import standard_split
from trainables.data._registry import DatasetInfo
from trainables.data._registry import dataset_info
from trainables.data._registry import dataset_names
from trainables.data._registry import load_dataset
from trainables.data._registry import register_dataset

__all__ = [
    "Dataset",
    "DatasetInfo",
    "ImageSet",
    "dataset_info",
    "dataset_names",
    "load_dataset",
    "register_dataset",
    "standard_split",
]
