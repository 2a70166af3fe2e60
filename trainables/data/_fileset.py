"""File-backed labelled images (:class:`FileImageSet`): files decoded when a batch needs them.

The large photo datasets (CUB-200-2011, CARS196, SOP, Mini-ImageNet at 224 px) do not fit in memory
as decoded pixels, and training needs a fresh random crop every epoch anyway, so they are kept as
file names plus labels. A :class:`FileImageSet` answers the same questions as an in-memory
:class:`~trainables.data.ImageSet` (``labels``, ``class_names``, ``len``, ``subset``, ``classes``,
``select_classes``, ``channels``, ``image_size``, ``num_classes``), so protocols and samplers treat
both alike; pixels come out of :mod:`trainables.data._batches`, which decodes and transforms them
(possibly in worker processes) under the set's :class:`TransformSpec`.

Files live under ``root``, a folder, or inside a ``.zip`` (``archive=True``), read in place. Each
process opens the archive once, on first use (archives are never shared across a fork: a shared
file offset would mix up reads).

With a decoded store attached (:meth:`FileImageSet.with_store`, :mod:`trainables.data._store`)
the files are not decoded again: batches come from the store (``rows`` are the set's images in
it), cut on the host and augmented on the compute device (:mod:`trainables.data._store_loader`).
When the transform crops the originals for training (``train_crops=original``), training crops
come from a second, full-size store of the training classes (``crop_store``, ``crop_rows``;
:meth:`FileImageSet.with_crop_store`), evaluation from the resized one.
"""

from __future__ import annotations

import dataclasses
import os
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import ClassVar

import numpy as np
import torch
from PIL import Image

from dmlsearch.trainables.data._items import ClassSelection
from dmlsearch.trainables.data._transforms import TransformSpec
from dmlsearch.trainables.data._transforms import apply_transform
from dmlsearch.trainables.data._tree import decode_image
from dmlsearch.trainables.errors import UserError

if TYPE_CHECKING:
    from dmlsearch.trainables.data._store import DecodedStore

__all__ = ["FileImageSet"]

_ARCHIVES: dict[tuple[str, int], zipfile.ZipFile] = {}


def _archive(location: str) -> zipfile.ZipFile:
    """The open ``.zip`` at ``location`` for this process (opened once per process)."""
    key = (location, os.getpid())
    archive = _ARCHIVES.get(key)
    if archive is None:
        archive = _ARCHIVES[key] = zipfile.ZipFile(location)
    return archive


@dataclass(frozen=True, eq=False)
class FileImageSet(ClassSelection):
    """Labelled image files, decoded on demand.

    Attributes:
        root: the folder the ``files`` are relative to (``""`` for absolute paths), or a ``.zip``.
        files: object array ``[N]`` of file paths relative to ``root`` (members when ``archive``).
        labels: int64 array ``[N]`` of class ids ``0..K-1`` of the whole dataset.
        class_names: ``class_names[label]`` is a readable name of that class.
        transform: how one decoded image becomes a uint8 ``[C, size, size]`` crop.
        archive: whether ``root`` is a ``.zip`` read in place.
        dataset: the dataset's name, for messages.
        store: the decoded store of the dataset's files, or ``None`` (decode every epoch).
        rows: int64 ``[N]``: each image's row in ``store`` (with a store only).
        crop_store: the full-size store training crops are cut from (``train_crops=original``),
            or ``None`` (they are cut from ``store``).
        crop_rows: int64 ``[N]``: each image's row in ``crop_store``, -1 where it has none (an
            image of a class nobody trains on).
    """

    root: str
    files: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]
    transform: TransformSpec
    archive: bool = False
    dataset: str = "files"
    store: DecodedStore | None = None
    rows: np.ndarray | None = None
    crop_store: DecodedStore | None = None
    crop_rows: np.ndarray | None = None

    input_kind: ClassVar[str] = "image"

    def __post_init__(self) -> None:
        files = np.asarray(self.files, dtype=object).reshape(-1)
        labels = np.asarray(self.labels)
        if labels.ndim != 1 or labels.shape[0] != files.shape[0]:
            raise ValueError(
                f"FileImageSet.labels must have shape [{files.shape[0]}], got {labels.shape}"
            )
        if labels.size and not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"FileImageSet.labels must be integers, got {labels.dtype}")
        labels = labels.astype(np.int64, copy=False)
        class_names = tuple(self.class_names)
        if labels.size and (labels.min() < 0 or labels.max() >= len(class_names)):
            raise ValueError(
                f"FileImageSet.labels must lie in 0..{len(class_names) - 1}, got "
                f"{labels.min()}..{labels.max()}"
            )
        if not isinstance(self.transform, TransformSpec):
            raise ValueError(
                f"FileImageSet.transform must be a TransformSpec, got {self.transform!r}"
            )
        object.__setattr__(self, "root", os.fspath(self.root))
        object.__setattr__(self, "files", files)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "class_names", class_names)
        if (self.store is None) != (self.rows is None):
            raise ValueError("FileImageSet.store and .rows go together")
        if (self.crop_store is None) != (self.crop_rows is None):
            raise ValueError("FileImageSet.crop_store and .crop_rows go together")
        if self.crop_store is not None and self.store is None:
            raise ValueError("FileImageSet.crop_store needs a store (evaluation reads it)")
        for field in ("rows", "crop_rows"):
            if getattr(self, field) is not None:
                rows = np.asarray(getattr(self, field), dtype=np.int64).reshape(-1)
                if rows.shape != files.shape:
                    raise ValueError(f"FileImageSet.{field} must have shape {files.shape}, "
                                     f"got {rows.shape}")
                object.__setattr__(self, field, rows)

    # ---- what ImageSet also answers -----------------------------------------------------
    def __len__(self) -> int:
        return int(self.files.shape[0])

    def __repr__(self) -> str:
        stored = "" if self.store is None else f", decoded in {self.store.folder}"
        if self.crop_store is not None:
            stored += f" and, full size, in {self.crop_store.folder}"
        return (
            f"FileImageSet({len(self)} images, {len(self.classes())} classes, "
            f"{self.channels}x{self.image_size}x{self.image_size} from {self.root}{stored})"
        )

    @property
    def channels(self) -> int:
        """Number of channels of the output crops: 1 (grey) or 3 (RGB)."""
        return self.transform.channels

    @property
    def image_size(self) -> int:
        """Side of the square output crops in pixels (``transform.size``)."""
        return self.transform.size

    @property
    def num_classes(self) -> int:
        """Number of classes of the whole dataset (``len(class_names)``), present here or not."""
        return len(self.class_names)

    def subset(self, indices: np.ndarray) -> FileImageSet:
        """The images at ``indices`` (int positions), in that order; labels and names unchanged."""
        idx = np.asarray(indices)
        if idx.dtype == np.bool_:
            raise ValueError(
                "FileImageSet.subset takes integer positions; use np.flatnonzero(mask)"
            )
        idx = idx.astype(np.int64, copy=False).reshape(-1)
        rows = None if self.rows is None else self.rows[idx]
        crop_rows = None if self.crop_rows is None else self.crop_rows[idx]
        return dataclasses.replace(self, files=self.files[idx], labels=self.labels[idx],
                                   rows=rows, crop_rows=crop_rows)


    # ---- files and pixels ---------------------------------------------------------------
    def with_transform(self, transform: TransformSpec) -> FileImageSet:
        """The same files under another transform (without a store: it was decoded for the
        transform's resize)."""
        return dataclasses.replace(self, transform=transform, store=None, rows=None,
                                   crop_store=None, crop_rows=None)

    def with_store(self, store: DecodedStore) -> FileImageSet:
        """The same images, read from ``store`` (which holds every file of this set)."""
        if store.short != self.transform.resize or store.channels != self.channels:
            raise ValueError(f"a store of shorter side {store.short} and {store.channels} "
                             f"channels cannot serve transform {self.transform}")
        return dataclasses.replace(self, store=store, rows=store.rows(self.files))

    def with_crop_store(self, store: DecodedStore) -> FileImageSet:
        """The same images, their training crops cut from ``store``, a full-size store (of the
        training classes' files: the others get row -1); needs :meth:`with_store` first."""
        if store.short is not None or store.channels != self.channels:
            raise ValueError(f"a store of shorter side {store.short} and {store.channels} "
                             f"channels cannot serve full-size crops of {self.transform}")
        return dataclasses.replace(self, crop_store=store,
                                   crop_rows=store.rows(self.files, missing=-1))

    def without_store(self) -> FileImageSet:
        """The same images, decoded from their files."""
        return dataclasses.replace(self, store=None, rows=None, crop_store=None,
                                   crop_rows=None)

    def describe(self, index: int) -> str:
        """Where image ``index`` is, for messages: a path, or ``archive.zip!member``."""
        name = str(self.files[index])
        return f"{self.root}!{name}" if self.archive else os.path.join(self.root, name)

    def read_bytes(self, index: int) -> bytes:
        """The raw bytes of image ``index``; a missing or unreadable file is a UserError."""
        name = str(self.files[index])
        try:
            if self.archive:
                return _archive(self.root).read(name)
            with open(os.path.join(self.root, name), "rb") as handle:
                return handle.read()
        except (OSError, KeyError, zipfile.BadZipFile, EOFError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise UserError(
                f"{self.dataset}: cannot read image {self.describe(index)} ({reason}): "
                "restore that file or fix --data-root"
            ) from None

    def load(self, index: int) -> Image.Image:
        """Image ``index`` decoded, upright, in the transform's mode (RGB or L)."""
        return decode_image(
            self.read_bytes(index), mode=self.transform.mode, where=self.describe(index),
            dataset=self.dataset,
        )

    def decode(
        self, index: int, *, train: bool = False, rng: np.random.Generator | None = None
    ) -> torch.Tensor:
        """uint8 ``[C, size, size]`` of image ``index`` under the train or eval transform."""
        return apply_transform(self.load(index), self.transform, train=train, rng=rng)
