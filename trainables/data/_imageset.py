"""In-memory labelled images (:class:`ImageSet`) and a dataset with its standard split.

Small datasets (glyphs, Omniglot, Cifar-10, small folders) are held in memory as one uint8 tensor;
the large photo datasets are file-backed (:mod:`trainables.data._fileset`) and answer the same
questions. Either way every protocol (fixed validation, class-disjoint k-fold, the final test)
works by selecting classes out of one image set rather than by re-reading metadata. Labels stay
the dataset-wide class ids in every subset, so a subset's ``labels`` still index ``class_names``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from dmlsearch.trainables.data._items import ClassSelection
from dmlsearch.trainables.data._items import LabelledItems

__all__ = ["Dataset", "ImageSet", "standard_split"]


@dataclass(frozen=True, eq=False)
class ImageSet(ClassSelection):
    """Labelled images held in memory.

    Attributes:
        images: uint8 tensor ``[N, C, H, W]`` (``C`` = 1 grayscale or 3 RGB), contiguous; the
            registered datasets make them square (``H == W == image_size``).
        labels: int64 array ``[N]`` of class ids ``0..K-1`` of the whole dataset.
        class_names: ``class_names[label]`` is a readable name of that class.
    """

    images: torch.Tensor
    labels: np.ndarray
    class_names: tuple[str, ...]

    input_kind: ClassVar[str] = "image"

    def __post_init__(self) -> None:
        images, labels = self.images, self.labels
        if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(
                f"ImageSet.images must be a uint8 tensor [N, C, H, W], got "
                f"{type(images).__name__} {getattr(images, 'dtype', None)} "
                f"{tuple(getattr(images, 'shape', ()))}"
            )
        if images.shape[1] not in (1, 3):
            raise ValueError(f"ImageSet.images must have 1 or 3 channels, got {images.shape[1]}")
        if not images.is_contiguous():
            object.__setattr__(self, "images", images.contiguous())
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
            raise ValueError(
                f"ImageSet.labels must have shape [{images.shape[0]}], got {labels.shape}"
            )
        if labels.dtype != np.int64:
            if labels.size and not np.issubdtype(labels.dtype, np.integer):
                raise ValueError(f"ImageSet.labels must be integers, got {labels.dtype}")
            labels = labels.astype(np.int64)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "class_names", tuple(self.class_names))
        if labels.size and (labels.min() < 0 or labels.max() >= len(self.class_names)):
            raise ValueError(
                f"ImageSet.labels must lie in 0..{len(self.class_names) - 1}, got "
                f"{labels.min()}..{labels.max()}"
            )

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __repr__(self) -> str:
        return (
            f"ImageSet({len(self)} images, {len(self.classes())} classes, "
            f"{self.channels}x{self.image_size}x{self.image_size})"
        )

    @property
    def channels(self) -> int:
        """Number of channels: 1 (grayscale) or 3 (RGB)."""
        return int(self.images.shape[1])

    @property
    def image_size(self) -> int:
        """Height (= width) of every image in pixels."""
        return int(self.images.shape[2])

    @property
    def num_classes(self) -> int:
        """Number of classes of the whole dataset (``len(class_names)``), present here or not."""
        return len(self.class_names)

    def subset(self, indices: np.ndarray) -> ImageSet:
        """The images at ``indices`` (int positions), in that order; labels and names unchanged."""
        idx = np.asarray(indices)
        if idx.dtype == np.bool_:
            raise ValueError("ImageSet.subset takes integer positions; use np.flatnonzero(mask)")
        idx = idx.astype(np.int64, copy=False).reshape(-1)
        return ImageSet(
            images=self.images[torch.from_numpy(idx.copy())].contiguous(),
            labels=self.labels[idx],
            class_names=self.class_names,
        )



def standard_split(num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The standard DML split (Psomas 2020 §3.1): the first half of the classes train, the rest
    test.

    With an odd number of classes the test half gets the extra class.
    """
    if num_classes < 2:
        raise ValueError(f"a dataset needs at least 2 classes for a split, got {num_classes}")
    half = num_classes // 2
    return np.arange(half, dtype=np.int64), np.arange(half, num_classes, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class Dataset:
    """A named dataset: every image plus the standard class-disjoint train/test split.

    ``images`` are any :class:`~trainables.data._items.LabelledItems`: an in-memory
    :class:`ImageSet`, a file-backed ``FileImageSet``, an audio dataset's ``AudioSet`` of
    utterances (:mod:`trainables.audio`); all answer the same questions (``input_kind`` says
    which kind of items they are: :mod:`trainables.input_kinds`).
    ``val_classes`` are classes a dataset's official split sets apart for validation (Mini-ImageNet's 16) and puts in neither train nor test; empty for most datasets.
    The search never uses them on its own: its validation classes come out of ``train_classes``
    (Psomas 2020 ch. 5: fixed split or k-fold); they are there for a protocol that asks for them.

    ``eq=False`` like :class:`ImageSet`: its fields are arrays, which have no single truth value.
    """

    name: str
    images: LabelledItems
    train_classes: np.ndarray
    test_classes: np.ndarray
    val_classes: np.ndarray | None = None

    def __post_init__(self) -> None:
        train = np.asarray(self.train_classes, dtype=np.int64)
        test = np.asarray(self.test_classes, dtype=np.int64)
        val = np.asarray([] if self.val_classes is None else self.val_classes, dtype=np.int64)
        object.__setattr__(self, "train_classes", train)
        object.__setattr__(self, "test_classes", test)
        object.__setattr__(self, "val_classes", val)
        if np.intersect1d(train, test).size:
            raise ValueError(f"dataset {self.name!r}: train and test classes overlap")
        if np.intersect1d(val, np.union1d(train, test)).size:
            raise ValueError(f"dataset {self.name!r}: validation classes overlap train or test")
        everything = np.arange(self.images.num_classes)
        if not np.array_equal(np.union1d(np.union1d(train, test), val), everything):
            raise ValueError(
                f"dataset {self.name!r}: train, test (and validation) classes must cover "
                f"0..{everything.size - 1}"
            )

    @classmethod
    def with_standard_split(cls, *, name: str, images: LabelledItems) -> Dataset:
        """A dataset whose split is :func:`standard_split` over all its classes."""
        train, test = standard_split(images.num_classes)
        return cls(name=name, images=images, train_classes=train, test_classes=test)

    @property
    def input_kind(self) -> str:
        """What the dataset's items are: a name of :mod:`trainables.input_kinds`."""
        return self.images.input_kind

    def train(self) -> LabelledItems:
        """The images of the training classes (search and retraining use only these)."""
        return self.images.select_classes(self.train_classes)

    def test(self) -> LabelledItems:
        """The images of the test classes (never used for model selection)."""
        return self.images.select_classes(self.test_classes)

    def val(self) -> LabelledItems:
        """The images of the official validation classes (empty for most datasets)."""
        return self.images.select_classes(self.val_classes)

    def __repr__(self) -> str:
        val = f", validation {self.val_classes.size} classes" if self.val_classes.size else ""
        return (
            f"Dataset({self.name!r}, {self.images!r}, train {self.train_classes.size} classes, "
            f"test {self.test_classes.size} classes{val})"
        )
