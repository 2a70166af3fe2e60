"""Helpers of the file readers: register one, find the dataset's folder, read its lists, check
files.

A reader is registered with what differs from the others, and receives only what it needs: an
official-layout reader (:func:`register_layout`) the dataset's own folder and the image size; a
class-per-folder tree (:func:`register_tree`) is read here whole, the reader giving only how one
decoded image becomes its pixels. Each official-layout reader names the files its layout must
have; :func:`find_top` accepts the dataset's own folder or a folder above it (the official folder
name, or the only sub-folder that has those files), and every mistake is one
:class:`~trainables.errors.UserError` line that says what was expected, what is missing, and
where.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

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
from dmlsearch.trainables.errors import UserError

__all__ = ["check_files", "find_top", "layout_error", "read_rows", "register_layout",
           "register_tree"]

logger = logging.getLogger(__name__)

#: ``(folder, image_size) -> Dataset``: an official-layout reader, given the dataset's folder.
LayoutReader = Callable[[str, int], Dataset]
#: ``(image, image_size) -> uint8 [C, size, size] or [size, size]``: a decoded tree image's
#: pixels.
TreePixels = Callable[[Image.Image, int], np.ndarray]
_CHANNELS = {"L": 1, "RGB": 3}


def register_layout(
    name: str, *, layout: str, required: Sequence[str], folder: str | None = None,
    **registration: Any,
) -> Callable[[LayoutReader], LayoutReader]:
    """Decorator: register ``read(top, image_size)`` as the dataset ``name`` read from files,
    ``top`` being the folder :func:`find_top` finds under the root (``required``, ``folder``);
    ``registration``: the rest of :func:`~trainables.data.register_dataset`'s arguments."""

    def decorate(read: LayoutReader) -> LayoutReader:
        @register_dataset(name, needs_root=True, layout=layout, **registration)
        def build(*, root: str | None, image_size: int, seed: int) -> Dataset:
            del seed  # reading files is deterministic
            assert root is not None, "the registry checks that a root is given"
            top = find_top(root, dataset=name, layout=layout, required=required, folder=folder)
            return read(top, image_size)

        return read

    return decorate


def register_tree(
    name: str, *, description: str, layout: str, depth: int, extensions: tuple[str, ...],
    mode: str, what: str = "images", too_large: Callable[[int, int], bool] | None = None,
) -> Callable[[TreePixels], TreePixels]:
    """Decorator: register the class-per-folder tree dataset ``name`` (``depth`` path parts per
    image file, :func:`~trainables.data._tree.open_tree`), its images decoded in PIL ``mode``,
    made ``pixels(image, image_size)`` and held in memory, classes sorted, standard split; where
    ``too_large(count, image_size)`` (if given) they stay files instead, decoded per batch with
    the photo transforms. ``what`` names the images in the log."""
    channels = _CHANNELS[mode]

    def decorate(pixels: TreePixels) -> TreePixels:
        @register_dataset(name, description=description, needs_root=True, layout=layout)
        def build(*, root: str | None, image_size: int, seed: int) -> Dataset:
            del seed  # reading files is deterministic
            assert root is not None, "the registry checks that a root is given"
            started = time.perf_counter()
            with open_tree(root, depth=depth, extensions=extensions, dataset=name,
                           layout=layout) as tree:
                class_names = tree.class_names
                keys, labels = tree.labelled_keys()
                count = len(keys)
                if too_large is not None and too_large(count, image_size):
                    logger.info(
                        "%s: %d images of %d classes at %d px exceed the in-memory budget: "
                        "reading them from %s per batch", name, count, len(class_names),
                        image_size, root,
                    )
                    return Dataset.with_standard_split(name=name, images=FileImageSet(
                        root=root, files=np.asarray(keys, dtype=object), labels=labels,
                        class_names=class_names,
                        transform=TransformSpec.for_size(image_size, channels=channels),
                        archive=not os.path.isdir(root), dataset=name,
                    ))
                decoded = np.empty((count, channels, image_size, image_size), dtype=np.uint8)
                for i, key in enumerate(keys):
                    decoded[i] = pixels(read_image(tree, key, mode=mode, dataset=name), image_size)
            logger.info(
                "read %d %s of %d classes from %s in %.1fs",
                count, what, len(class_names), root, time.perf_counter() - started,
            )
            images = ImageSet(images=torch.from_numpy(decoded), labels=labels,
                              class_names=class_names)
            return Dataset.with_standard_split(name=name, images=images)

        return pixels

    return decorate


def layout_error(dataset: str, layout: str, found: str) -> UserError:
    return UserError(f"{dataset}: expected --data-root DIR to be {layout}; {found}")


def _missing(folder: str, required: Sequence[str]) -> list[str]:
    return [name for name in required if not os.path.exists(os.path.join(folder, name))]


def find_top(
    root: str, *, dataset: str, layout: str, required: Sequence[str], folder: str | None = None
) -> str:
    """The folder holding every name of ``required``: ``root``, ``root/folder``, or the only
    sub-folder of ``root`` that has them all."""
    if not os.path.exists(root):
        raise layout_error(dataset, layout, f"{root} does not exist")
    if not os.path.isdir(root):
        raise layout_error(
            dataset, layout, f"{root} is a file, not a folder (unpack the archive and pass the "
            "folder it gives)"
        )
    missing = _missing(root, required)
    if not missing:
        return root
    if folder is not None and os.path.isdir(os.path.join(root, folder)):
        inner = os.path.join(root, folder)
        inner_missing = _missing(inner, required)
        if not inner_missing:
            return inner
        raise layout_error(
            dataset, layout, f"{inner} lacks {', '.join(inner_missing)} (it has "
            f"{_listing(inner)})"
        )
    try:
        children = sorted(e.path for e in os.scandir(root) if e.is_dir() and e.name[0] != ".")
    except OSError as exc:
        raise layout_error(dataset, layout, f"{root} cannot be listed ({exc})") from None
    matches = [child for child in children if not _missing(child, required)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        names = ", ".join(os.path.basename(m) for m in matches)
        raise layout_error(dataset, layout, f"{root} holds several such folders ({names}): "
                           "pass one of them")
    raise layout_error(
        dataset, layout, f"{root} lacks {', '.join(missing)} (it has {_listing(root)})"
    )


def _listing(folder: str, limit: int = 6) -> str:
    try:
        names = sorted(n for n in os.listdir(folder) if not n.startswith("."))
    except OSError:
        return "nothing readable"
    if not names:
        return "nothing"
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")


def read_rows(
    path: str, *, dataset: str, columns: int, header: str | None = None, sep: str | None = None
) -> list[list[str]]:
    """The rows of a text table: ``columns`` fields per line split on ``sep`` (default:
    whitespace, the last field keeping any spaces); blank lines skipped; ``header`` (the first
    field of an optional first line) skipped."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{dataset}: cannot read {path} ({exc})") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = [f.strip() for f in (line.split(sep, columns - 1) if sep else
                                      line.strip().split(None, columns - 1))]
        if number == 1 and header is not None and fields[0] == header:
            continue
        if len(fields) != columns or not all(fields):
            raise UserError(
                f"{dataset}: {path} line {number} should have {columns} fields, got "
                f"{line.strip()[:80]!r}: restore the original file"
            )
        rows.append(fields)
    if not rows:
        raise UserError(f"{dataset}: {path} lists nothing: restore the original file")
    return rows


def check_files(top: str, files: Sequence[str], *, dataset: str, listed_in: str) -> None:
    """Every path of ``files`` (relative to ``top``) exists; one listing per folder, no stat."""
    present: dict[str, set[str] | None] = {}
    missing = []
    for name in files:
        folder, base = os.path.split(name)
        if folder not in present:
            try:
                present[folder] = set(os.listdir(os.path.join(top, folder)))
            except OSError:
                present[folder] = None
        names = present[folder]
        if names is None or base not in names:
            missing.append(name)
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise UserError(
            f"{dataset}: {len(missing)} of the {len(files)} images listed in {listed_in} are "
            f"missing under {top} ({shown}): extract the complete dataset there"
        )
