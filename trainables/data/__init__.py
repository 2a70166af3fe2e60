"""Datasets as labelled images, built by name from a registry, and batches of their pixels.

``load_dataset("glyphs")`` needs no files (characters drawn from matplotlib's fonts, cached after
the first build); the others read the official layout of a dataset under ``root``
(``--data-root DIR`` on the command line): ``omniglot``, ``folder`` (any class-per-folder tree),
``cifar10`` (held in memory, like ``glyphs``), and the photo datasets ``cub200``, ``cars196``,
``sop`` and ``mini_imagenet``, which are file-backed (:class:`FileImageSet`: files decoded and
augmented per batch). Every :class:`Dataset` carries its standard class-disjoint split (Psomas 2020
§3.1).

Audio datasets (``speakers``, built in with espeak-ng; ``voxceleb1``, ``voxceleb2``,
``speaker_folder``) hold an :class:`~trainables.audio.AudioSet` of utterances instead, which serves
features ``[B, n_features, T]`` through the same :class:`BatchLoader` (:mod:`trainables.audio`).

Pixels come out of :class:`BatchLoader` / :func:`iterate_batches` for both kinds of set alike:
``(uint8 [B, C, H, W], int64 [B])`` per index array.
"""

from __future__ import annotations

from dmlsearch.trainables.data import _audio as _audio  # noqa: F401  (the audio datasets)
from dmlsearch.trainables.data import _cars as _cars  # noqa: F401  (registers "cars196")
from dmlsearch.trainables.data import _cifar as _cifar  # noqa: F401  (registers "cifar10")
from dmlsearch.trainables.data import _cub as _cub  # noqa: F401  (registers "cub200")
from dmlsearch.trainables.data import _folder as _folder  # noqa: F401  (registers "folder")
from dmlsearch.trainables.data import _glyphs as _glyphs  # noqa: F401  (registers "glyphs")
from dmlsearch.trainables.data import _mini_imagenet as _mini_imagenet  # noqa: F401  ("mini_imagenet")
from dmlsearch.trainables.data import _omniglot as _omniglot  # noqa: F401  (registers "omniglot")
from dmlsearch.trainables.data import _sop as _sop  # noqa: F401  (registers "sop")
from dmlsearch.trainables.data import _table as _table  # noqa: F401  (registers "table")
from dmlsearch.trainables.data._batches import AnyImageSet
from dmlsearch.trainables.data._batches import Batch
from dmlsearch.trainables.data._batches import BatchLoader
from dmlsearch.trainables.data._batches import SetLoader
from dmlsearch.trainables.data._batches import iterate_batches
from dmlsearch.trainables.data._batches import sequential_batches
from dmlsearch.trainables.data._fileset import FileImageSet
from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._imageset import ImageSet
from dmlsearch.trainables.data._imageset import standard_split
from dmlsearch.trainables.data._items import ClassSelection
from dmlsearch.trainables.data._items import LabelledItems
from dmlsearch.trainables.data._registry import DatasetInfo
from dmlsearch.trainables.data._registry import dataset_info
from dmlsearch.trainables.data._registry import dataset_names
from dmlsearch.trainables.data._registry import load_dataset
from dmlsearch.trainables.data._registry import register_dataset
from dmlsearch.trainables.data._store import CACHE_CHOICES
from dmlsearch.trainables.data._store import DecodedStore
from dmlsearch.trainables.data._store import StoreStats
from dmlsearch.trainables.data._store import size_text
from dmlsearch.trainables.data._store import store_folder
from dmlsearch.trainables.data._store_attach import attach_store
from dmlsearch.trainables.data._store_attach import check_decodable
from dmlsearch.trainables.data._transforms import TRAIN_CROPS
from dmlsearch.trainables.data._transforms import TRAIN_MODES
from dmlsearch.trainables.data._transforms import TransformSpec
from dmlsearch.trainables.data._transforms import eval_resize

__all__ = [
    "CACHE_CHOICES",
    "TRAIN_CROPS",
    "TRAIN_MODES",
    "AnyImageSet",
    "Batch",
    "BatchLoader",
    "ClassSelection",
    "Dataset",
    "DatasetInfo",
    "DecodedStore",
    "FileImageSet",
    "ImageSet",
    "LabelledItems",
    "SetLoader",
    "StoreStats",
    "TransformSpec",
    "attach_store",
    "check_decodable",
    "dataset_info",
    "dataset_names",
    "eval_resize",
    "iterate_batches",
    "load_dataset",
    "register_dataset",
    "sequential_batches",
    "size_text",
    "standard_split",
    "store_folder",
]
