"""A dataset's file-backed images joined to their decoded stores (:func:`attach_store`), the
decode check that ``cache=off`` runs instead (:func:`check_decodable`), and both as the image
kind opens a dataset for trials (:func:`open_images`, named by ``trainables.input_kinds``).

The store (:mod:`trainables.data._store`) knows files and pixels only; this module knows the
sets that read them, so neither imports the other's owner.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from dmlsearch.trainables.data._fileset import FileImageSet
from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._store import StoreStats
from dmlsearch.trainables.data._store import check_decodes
from dmlsearch.trainables.data._store import open_store

if TYPE_CHECKING:
    from dmlsearch.trainables.config import TrialConfig

__all__ = ["attach_store", "check_decodable", "open_images"]


def check_decodable(images: FileImageSet, *, workers: int | None = None) -> None:
    """Decode every file of ``images`` once (in parallel) and raise the first that fails: what
    ``cache=off`` checks before a search, since no store build does it."""
    check_decodes(images.root, images.files, archive=images.archive,
                  mode=images.transform.mode, dataset=images.dataset, workers=workers)


def attach_store(dataset: Dataset, *, cache: str, limit_gb: float = 0.0,
                 workers: int | None = None) -> tuple[Dataset, StoreStats | None]:
    """``dataset`` with its file-backed images read from their decoded store (opened, or built
    first), and, when its transform crops the originals for training, from the full-size store
    of its training classes too; unchanged (and ``None``) for in-memory datasets and
    ``cache=off``."""
    images = dataset.images
    if cache == "off" or not isinstance(images, FileImageSet):
        return dataset, None
    if images.store is not None:
        return dataset, None
    common = {"archive": images.archive, "mode": images.transform.mode,
              "dataset": images.dataset, "cache": cache, "limit_gb": limit_gb,
              "workers": workers}
    store, stats = open_store(images.root, images.files, short=images.transform.resize,
                              **common)
    images = images.with_store(store)
    if images.transform.crops_from_original:
        training = dataset.images.select_classes(dataset.train_classes).files
        crops, crop_stats = open_store(images.root, training, short=None,
                                       keep=frozenset({stats.key}), **common)
        images, stats = images.with_crop_store(crops), stats.plus(crop_stats)
    return dataclasses.replace(dataset, images=images), stats


def open_images(dataset: Dataset, cfg: TrialConfig, *, check_files: bool
                ) -> tuple[Dataset, StoreStats | None]:
    """``dataset`` as a trial reads it: file-backed images from their decoded store (opened, or
    built first, which decodes every file) unless ``cache`` is ``off``, where ``check_files``
    decodes every file once instead; in-memory images as they are."""
    if cfg.cache == "off":
        if check_files and isinstance(dataset.images, FileImageSet):
            check_decodable(dataset.images)
        return dataset, None
    return attach_store(dataset, cache=cfg.cache, limit_gb=cfg.cache_limit_gb)
