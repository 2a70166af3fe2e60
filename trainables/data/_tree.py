"""Reading class-per-folder image trees from a folder or straight from a ``.zip`` (no extraction).

A dataset on disk is a set of image files whose path, relative to the dataset's top, has a fixed
number of parts: ``<alphabet>/<character>/<file>`` for Omniglot, ``<class>/<file>`` for a generic
tree. :func:`open_tree` accepts that top itself, a folder holding exactly one such top (what an
archive usually unpacks to), or a ``.zip`` of either, and returns the image files grouped by class.
Wrong layouts and unreadable images are :class:`~trainables.errors.UserError` s naming the file.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np
from PIL import Image
from PIL import ImageOps
from PIL import UnidentifiedImageError

from dmlsearch.trainables.errors import UserError

__all__ = ["ImageTree", "decode_image", "open_tree", "read_image", "to_uint8"]


@dataclass(frozen=True)
class ImageTree:
    """Image files grouped by class: ``classes[name]`` lists the files' locations, sorted."""

    location: str  # the root as given, for messages
    classes: dict[str, list[str]]  # class name → file keys (for ``read``), both sorted by path
    read: Callable[[str], bytes]  # file key → bytes
    describe: Callable[[str], str]  # file key → where it is, for messages

    @property
    def class_names(self) -> tuple[str, ...]:
        """The classes' names, sorted: a class's label is its place here."""
        return tuple(sorted(self.classes))

    def labelled_keys(self) -> tuple[list[str], np.ndarray]:
        """Every file key, class after class in :attr:`class_names` order, and its label."""
        names = self.class_names
        keys = [key for name in names for key in self.classes[name]]
        labels = np.repeat(np.arange(len(names)), [len(self.classes[name]) for name in names])
        return keys, labels


def _is_hidden(part: str) -> bool:
    return part.startswith(".") or part == "__MACOSX"


def _layout_error(dataset: str, layout: str, root: str, found: str) -> UserError:
    return UserError(
        f"{dataset}: expected --data-root DIR to be {layout}; {root} {found}"
    )


def _summarise(paths: list[PurePosixPath], *, depth: int) -> str:
    """A short description of what a tree holds, for layout errors."""
    if not paths:
        return "holds no image files"
    depths = sorted({len(p.parts) for p in paths})
    tops = sorted({p.parts[0] for p in paths if len(p.parts) > 1})
    shown = ", ".join(tops[:5]) + (", ..." if len(tops) > 5 else "")
    text = f"holds {len(paths)} image files at depth {'/'.join(str(d) for d in depths)}"
    if tops:
        text += f" under {len(tops)} top folder{'s' if len(tops) > 1 else ''} ({shown})"
    if depths == [depth + 1]:
        text += ": pass one of those folders instead"
    return text


def _group(
    keys: dict[PurePosixPath, str], *, depth: int, dataset: str, layout: str, root: str
) -> dict[str, list[str]]:
    """File keys grouped by class (the path's folders), stripping one wrapping folder if any."""
    paths = list(keys)
    if paths and all(len(p.parts) == depth + 1 for p in paths):
        if len({p.parts[0] for p in paths}) == 1:
            keys = {PurePosixPath(*p.parts[1:]): key for p, key in keys.items()}
            paths = list(keys)
    if not paths or any(len(p.parts) != depth for p in paths):
        raise _layout_error(dataset, layout, root, _summarise(paths, depth=depth))
    groups: dict[str, list[str]] = {}
    for path in sorted(paths):
        groups.setdefault("/".join(path.parts[:-1]), []).append(keys[path])
    if len(groups) < 2:
        found = f"holds {len(paths)} image files of only {len(groups)} class ({', '.join(groups)})"
        raise _layout_error(dataset, layout, root, found)
    return groups


def _wanted(parts: tuple[str, ...], extensions: tuple[str, ...]) -> bool:
    return not any(_is_hidden(p) for p in parts) and parts[-1].lower().endswith(extensions)


@contextmanager
def open_tree(
    root: str, *, depth: int, extensions: tuple[str, ...], dataset: str, layout: str
) -> Iterator[ImageTree]:
    """The image tree at ``root`` (folder or ``.zip``); ``depth`` = path parts per image file."""
    if not os.path.exists(root):
        raise _layout_error(dataset, layout, root, "does not exist")
    if os.path.isdir(root):
        keys: dict[PurePosixPath, str] = {}
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not _is_hidden(d)]
            rel = os.path.relpath(folder, root)
            for name in files:
                key = os.path.normpath(os.path.join(rel, name))
                path = PurePosixPath(*key.split(os.sep))
                if _wanted(path.parts, extensions):
                    keys[path] = key

        def read_file(key: str) -> bytes:
            with open(os.path.join(root, key), "rb") as handle:
                return handle.read()

        yield ImageTree(
            location=root,
            classes=_group(keys, depth=depth, dataset=dataset, layout=layout, root=root),
            read=read_file,
            describe=lambda key: os.path.join(root, key),
        )
        return
    if not zipfile.is_zipfile(root):
        raise _layout_error(dataset, layout, root, "is a file but not a .zip archive")
    try:
        archive = zipfile.ZipFile(root)
    except (OSError, zipfile.BadZipFile) as exc:
        raise UserError(f"{dataset}: cannot open {root} as a .zip archive: {exc}") from None
    with archive:
        members = {
            PurePosixPath(n): n
            for n in archive.namelist()
            if not n.endswith("/") and _wanted(PurePosixPath(n).parts, extensions)
        }

        def read_member(key: str) -> bytes:
            try:
                return archive.read(key)
            except (OSError, zipfile.BadZipFile, EOFError) as exc:
                raise UserError(f"{dataset}: cannot read {root}!{key}: {exc}") from None

        yield ImageTree(
            location=root,
            classes=_group(members, depth=depth, dataset=dataset, layout=layout, root=root),
            read=read_member,
            describe=lambda key: f"{root}!{key}",
        )


def decode_image(data: bytes, *, mode: str, where: str, dataset: str) -> Image.Image:
    """Decode one image file's bytes fully, upright (EXIF), in PIL ``mode`` ("L" or "RGB").

    A file that cannot be decoded is a :class:`UserError` naming ``where`` it is and why in
    words (an empty file, a format PIL does not know; never the repr of a buffer).
    """
    try:
        if not data:
            raise ValueError("the file is empty")
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            image = ImageOps.exif_transpose(image)
            return image.convert(mode)
    except UnidentifiedImageError:  # "cannot identify image file <_io.BytesIO object at 0x..>"
        reason = "not an image format PIL can read"
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        reason = str(exc) or type(exc).__name__
    raise UserError(f"{dataset}: cannot read image {where} ({reason}): replace or delete "
                    "that file")


def read_image(tree: ImageTree, key: str, *, mode: str, dataset: str) -> Image.Image:
    """Decode one file of ``tree`` fully, upright (EXIF), in PIL ``mode`` ("L" or "RGB")."""
    return decode_image(tree.read(key), mode=mode, where=tree.describe(key), dataset=dataset)


def to_uint8(image: Image.Image) -> np.ndarray:
    """``[C, H, W]`` uint8 array of a PIL image in mode "L" or "RGB"."""
    pixels = np.asarray(image, dtype=np.uint8)
    return pixels[None] if pixels.ndim == 2 else np.ascontiguousarray(pixels.transpose(2, 0, 1))
