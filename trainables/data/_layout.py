"""Helpers of the official-layout readers: find the dataset's folder, read its lists, check files.

Each reader names the files its layout must have; :func:`find_top` accepts the dataset's own
folder or a folder above it (the official folder name, or the only sub-folder that has those
files), and every mistake is one :class:`~trainables.errors.UserError` line that says what was
expected, what is missing, and where.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from dmlsearch.trainables.errors import UserError

__all__ = ["check_files", "find_top", "layout_error", "read_rows"]


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
