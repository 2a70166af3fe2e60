"""The dataset registry: ``@register_dataset`` on a builder, ``load_dataset(name)`` to build one.

Modelled on timm's ``register_model``: a decorator fills a name → :class:`DatasetInfo` map, and
what a search swaps by name is looked up there. An unknown name, or a dataset that needs files
and got no root, is a :class:`~trainables.errors.UserError` that says what to pass instead.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dmlsearch.trainables.data._fileset import FileImageSet
from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._transforms import TRAIN_CROPS
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.input_kinds import INPUT_KINDS
from dmlsearch.trainables.input_kinds import input_kind as kind_named
from dmlsearch.trainables.metrics.names import DEFAULT_KS
from dmlsearch.trainables.registry import Registry

__all__ = [
    "DatasetBuilder",
    "DatasetInfo",
    "dataset_info",
    "dataset_names",
    "load_dataset",
    "register_dataset",
]

logger = logging.getLogger(__name__)

#: Pixel sizes accepted by :func:`load_dataset` (images are square).
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 8, 1024


class DatasetBuilder(Protocol):
    """Builds a dataset; called with keyword arguments ``root``, ``image_size`` (None for an
    audio dataset) and ``seed``."""

    def __call__(self, *, root: str | None, image_size: int | None, seed: int) -> Dataset: ...


@dataclass(frozen=True)
class DatasetInfo:
    """What the registry knows about one dataset.

    Attributes:
        name: the name ``--dataset`` takes.
        builder: ``(root, image_size, seed) -> Dataset``, called with keywords.
        description: one line for ``--help`` and listings.
        needs_root: whether the dataset reads files under ``--data-root DIR``.
        layout: the file layout expected under the root (shown when the root is missing or wrong).
        image_size: the image size :func:`load_dataset` uses when given none: the native size of
            small in-memory sets (32 for glyphs, Cifar-10), the crop size of the reference
            transforms for photo datasets (224 for CUB, CARS, SOP).
        input_kind: what its items are, a name of :mod:`trainables.input_kinds` (``image``;
            ``audio``: utterances as features ``[B, n_features, T]``, :mod:`trainables.audio`);
            a dataset whose items are not pixels takes no image size.
        recall_ks: the Recall@k cut-offs its trials and retrains report (besides the one the
            metric names): the field's for the dataset, 1/2/4/8 unless it registers others.
    """

    name: str
    builder: DatasetBuilder
    description: str
    needs_root: bool
    layout: str = ""
    image_size: int = 32
    input_kind: str = "image"
    recall_ks: tuple[int, ...] = DEFAULT_KS


_DATASETS: Registry[DatasetInfo] = Registry("dataset", option="--dataset",
                                             fix="pass it as --dataset NAME")


def register_dataset(
    name: str,
    *,
    description: str,
    needs_root: bool = False,
    layout: str = "",
    image_size: int = 32,
    input_kind: str = "image",
    recall_ks: tuple[int, ...] = DEFAULT_KS,
) -> Callable[[DatasetBuilder], DatasetBuilder]:
    """Decorator: register ``builder`` under ``name`` (each name once)."""

    def decorate(builder: DatasetBuilder) -> DatasetBuilder:
        if needs_root and not layout:
            raise ValueError(f"dataset {name!r} needs a root, so it must describe its layout")
        if input_kind not in INPUT_KINDS:
            raise ValueError(f"dataset {name!r}: input_kind must be one of "
                             f"{', '.join(INPUT_KINDS.names())} (trainables.input_kinds)")
        _DATASETS.add(name, DatasetInfo(
            name=name,
            builder=builder,
            description=description,
            needs_root=needs_root,
            layout=layout,
            image_size=image_size,
            input_kind=input_kind,
            recall_ks=tuple(recall_ks),
        ))
        return builder

    return decorate


def dataset_names() -> list[str]:
    """Names of every registered dataset, sorted."""
    return _DATASETS.names()


def dataset_info(name: str) -> DatasetInfo:
    """The registry entry of ``name``; an unknown name is a :class:`UserError` listing all."""
    return _DATASETS.get(name)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def load_dataset(
    name: str, *, root: str | None = None, image_size: int | None = None, seed: int = 0,
    train_crops: str = "original",
) -> Dataset:
    """Build the dataset ``name`` at ``image_size`` × ``image_size`` pixels.

    Args:
        name: a registered name (see :func:`dataset_names`).
        root: the folder or ``.zip`` the dataset reads; required where the dataset ``needs_root``,
            ignored (with a warning) by built-in datasets.
        image_size: side of the square images in pixels; ``None``: the dataset's own default
            (:attr:`DatasetInfo.image_size`). In-memory sets are resized to it once; for
            file-backed sets it is the crop size of the transforms (training RandomResizedCrop,
            evaluation Resize(round(size·256/224)) + CenterCrop(size)).
        seed: seed of generated datasets (same seed → bit-identical images); file datasets
            ignore it.
        train_crops: where a file-backed set's training crops are cut from (one of
            ``TRAIN_CROPS``: ``original``, the full-size image; ``resized``, the image after the
            evaluation resize); in-memory and audio sets ignore it.
    """
    if train_crops not in TRAIN_CROPS:
        raise UserError(f"train_crops must be one of {', '.join(TRAIN_CROPS)}, got "
                        f"{train_crops!r}")
    info = dataset_info(name)
    if not kind_named(info.input_kind).pixels:
        return _load_unsized(info, root=root, image_size=image_size, seed=seed)
    if image_size is None:
        image_size = info.image_size
    if not _is_int(image_size) or not MIN_IMAGE_SIZE <= image_size <= MAX_IMAGE_SIZE:
        raise UserError(
            f"image size must be an integer in {MIN_IMAGE_SIZE}..{MAX_IMAGE_SIZE}, got "
            f"{image_size!r}"
        )
    if not _is_int(seed) or seed < 0:
        raise UserError(f"seed must be a non-negative integer, got {seed!r}")
    image_size, seed = int(image_size), int(seed)
    if info.needs_root and root is None:
        raise UserError(
            f"dataset {name!r} reads files: pass --data-root DIR, where DIR is {info.layout}"
        )
    if root is not None:
        root = os.path.expanduser(os.fspath(root))
        if not info.needs_root:
            logger.warning("dataset %r is built in: ignoring data root %s", name, root)
            root = None
    dataset = info.builder(root=root, image_size=image_size, seed=seed)
    assert isinstance(dataset, Dataset), f"builder of {name!r} returned {type(dataset)}"
    assert dataset.images.image_size == image_size, "builder ignored image_size"
    images = dataset.images
    if isinstance(images, FileImageSet) and images.transform.train_crops != train_crops:
        spec = dataclasses.replace(images.transform, train_crops=train_crops)
        dataset = dataclasses.replace(dataset, images=images.with_transform(spec))
    logger.info("loaded %r", dataset)
    return dataset


def _load_unsized(info: DatasetInfo, *, root: str | None, image_size: int | None,
                  seed: int) -> Dataset:
    """A dataset whose items are not pixels (audio): no image size; otherwise as
    :func:`load_dataset`."""
    if image_size is not None:
        raise UserError(f"image_size applies to image datasets, but {info.name!r} is "
                        f"{info.input_kind} "
                        f"(got image_size={image_size!r}); leave image_size unset")
    if not _is_int(seed) or seed < 0:
        raise UserError(f"seed must be a non-negative integer, got {seed!r}")
    if info.needs_root and root is None:
        raise UserError(f"dataset {info.name!r} reads files: pass --data-root DIR, where DIR is "
                        f"{info.layout}")
    if root is not None:
        root = os.path.expanduser(os.fspath(root))
        if not info.needs_root:
            logger.warning("dataset %r is built in: ignoring data root %s", info.name, root)
            root = None
    dataset = info.builder(root=root, image_size=None, seed=int(seed))
    assert isinstance(dataset, Dataset), f"builder of {info.name!r} returned {type(dataset)}"
    logger.info("loaded %r", dataset)
    return dataset
