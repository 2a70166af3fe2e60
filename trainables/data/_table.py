"""The ``table`` dataset: images listed in a ``.csv`` or ``.parquet`` table, as open-metric-learning
users describe a dataset with a dataframe.

``--data-root`` is the table file. Its columns: ``path`` (an image file, relative to the table's
folder or absolute), ``label`` (any class id: the class names are the labels as text) and,
optionally, ``split``: ``train``, or ``test`` for the test classes (``validation``, what OML writes
for its held-out classes, counts as ``test`` too). The split is class-disjoint: a label in both is
an error. Without a ``split`` column the classes are sorted (numerically when every label is an
integer, as text otherwise) and :func:`~trainables.data.standard_split` trains on the first half,
as for ``folder``. Validation classes always come out of the training classes (the protocols).

Images are held as ``folder`` holds them (:mod:`trainables.data._folder`): decoded into memory at
``image_size`` when they fit in its :data:`~trainables.data._folder.MEMORY_BUDGET`, read from their
files per batch (a :class:`FileImageSet`, which the decoded store serves) above it. CSV is read
with the standard library; Parquet needs pyarrow, imported only for a ``.parquet`` table.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import re
import time
from collections.abc import Iterable
from collections.abc import Sequence

import numpy as np
import torch

from dmlsearch.trainables.data import _folder
from dmlsearch.trainables.data._fileset import FileImageSet
from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._imageset import ImageSet
from dmlsearch.trainables.data._imageset import standard_split
from dmlsearch.trainables.data._registry import register_dataset
from dmlsearch.trainables.data._transforms import TransformSpec
from dmlsearch.trainables.data._tree import to_uint8
from dmlsearch.trainables.errors import UserError

__all__ = ["SPLITS", "read_table"]

logger = logging.getLogger(__name__)

NAME = "table"
SUFFIXES = (".csv", ".parquet")
LAYOUT = (
    "a .csv or .parquet table with columns path (image file, relative to the table's folder or "
    "absolute), label (class id) and optionally split (train, test or validation)"
)
#: What a ``split`` cell may say (any case), and which side it puts the row's class on.
SPLITS = {"train": "train", "test": "test", "validation": "test"}
_SHOWN = 3  # how many paths, labels or rows an error names before "..."
_INTEGER = re.compile(r"[+-]?\d+")


def _error(root: str, problem: str, fix: str) -> UserError:
    return UserError(f"{NAME}: {root} {problem}: {fix}")


def _some(items: Sequence[object], total: int | None = None) -> str:
    """The first few ``items`` joined, with "..." when there are more."""
    total = len(items) if total is None else total
    shown = ", ".join(str(item) for item in items[:_SHOWN])
    return shown + (", ..." if total > _SHOWN else "")


def _rows(numbers: Sequence[int]) -> str:
    return f"row{'s' if len(numbers) > 1 else ''} {_some(numbers)}"


def _cell(value: object) -> str:
    """A cell as text: ``None`` (a missing value) and NaN are empty; whitespace stripped."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a Parquet label column with gaps is float: 3.0 is class 3
    return str(value).strip()


# ---- reading the table --------------------------------------------------------------------
def _read_csv(root: str) -> tuple[list[str], list[dict[str, str]]]:
    try:
        with open(root, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = [name.strip() for name in next(reader, [])]
            rows = [dict(zip(header, cells, strict=False)) for cells in reader if any(cells)]
    except UnicodeDecodeError:
        raise _error(root, "is not UTF-8 text", "save the table as UTF-8 CSV") from None
    except csv.Error as exc:
        raise _error(root, f"is not a readable CSV ({exc})", "fix the file") from None
    except OSError as exc:
        raise _error(root, f"cannot be read ({exc.strerror or exc})",
                     "check its permissions") from None
    return header, rows


def _read_parquet(root: str) -> tuple[list[str], list[dict[str, object]]]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(f"{NAME}: reading the Parquet table {root} needs pyarrow, which is not "
                        "installed: pip install pyarrow (or save the table as .csv)") from None
    try:
        names = pq.read_schema(root).names
        header = [str(name).strip() for name in names]
        wanted = [name for name in names if str(name).strip() in ("path", "label", "split")]
        columns = pq.read_table(root, columns=wanted).to_pydict()
    except (pa.ArrowException, OSError, ValueError) as exc:
        reason = (str(exc) or type(exc).__name__).splitlines()[0]
        raise _error(root, f"is not a readable Parquet file ({reason})",
                     "fix the file or pass a .csv") from None
    columns = {str(name).strip(): values for name, values in columns.items()}
    count = len(next(iter(columns.values()), []))
    return header, [{name: values[i] for name, values in columns.items()} for i in range(count)]


def read_table(root: str) -> tuple[list[str], list[str], list[str] | None]:
    """The table at ``root`` as its ``path``, ``label`` and ``split`` cells (text, stripped;
    ``split`` lower-cased, ``None`` without that column); a missing or unreadable file, another
    format, a missing column or an empty table is a :class:`UserError`."""
    suffix = os.path.splitext(root)[1].lower()
    if os.path.isdir(root):
        raise _error(root, "is a folder", f"pass the table file itself ({LAYOUT}); "
                     "a class-per-folder tree is --dataset folder")
    if not os.path.exists(root):
        raise _error(root, "does not exist", f"pass --data-root TABLE, {LAYOUT}")
    if suffix not in SUFFIXES:
        raise _error(root, f"is not a .csv or .parquet file (it ends in {suffix or 'no suffix'})",
                     "save the table as .csv or .parquet")
    header, rows = _read_csv(root) if suffix == ".csv" else _read_parquet(root)
    if not header:
        raise _error(root, "is empty", "write a header (path,label[,split]) and one row per "
                     "image")
    missing = [name for name in ("path", "label") if name not in header]
    if missing:
        found = ", ".join(name for name in header if name) or "none"
        raise _error(root, f"has no column {' or '.join(missing)} (its columns: {found})",
                     "name the image column path and the class column label")
    if not rows:
        raise _error(root, "has no rows", "list one image per row under the header")
    paths = [_cell(row.get("path")) for row in rows]
    labels = [_cell(row.get("label")) for row in rows]
    splits = [_cell(row.get("split")).lower() for row in rows] if "split" in header else None
    for column, cells in (("path", paths), ("label", labels)):
        empty = [i + 1 for i, cell in enumerate(cells) if not cell]
        if empty:
            raise _error(root, f"has no {column} in {_rows(empty)} (rows count from 1 below the "
                         "header)", f"fill in the {column} of every row or delete those rows")
    return paths, labels, splits


# ---- checking it --------------------------------------------------------------------------
def _check_files(root: str, folder: str, paths: list[str]) -> None:
    missing = [path for path in dict.fromkeys(paths)
               if not os.path.isfile(os.path.join(folder, path))]
    if missing:
        raise _error(root, f"lists {len(missing)} image file{'s' if len(missing) > 1 else ''} "
                     f"that do{'es' if len(missing) == 1 else ''} not exist ({_some(missing)})",
                     f"give paths relative to {folder} or absolute, or restore the files")


def _class_order(labels: Iterable[str]) -> list[str]:
    """The distinct labels, sorted numerically when every one is an integer, as text otherwise."""
    distinct = set(labels)
    if all(_INTEGER.fullmatch(label) for label in distinct):
        return sorted(distinct, key=lambda label: (int(label), label))
    return sorted(distinct)


def _split(root: str, labels: list[str], splits: list[str] | None,
           class_names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Train and test class ids: the ``split`` column's, or the standard split of them all."""
    if splits is None:
        if len(class_names) < 4:
            raise _error(root, f"has {len(class_names)} class{'es' if len(class_names) > 1 else ''}"
                         f" ({_some(class_names)}); without a split column the first half train "
                         "and the rest test, and each needs at least 2 classes",
                         "list images of at least 4 labels")
        return standard_split(len(class_names))
    unknown = [i for i, split in enumerate(splits) if split not in SPLITS]
    if unknown:
        values = list(dict.fromkeys(repr(splits[i]) for i in unknown))
        raise _error(root, f"has split {_some(values)} in {_rows([i + 1 for i in unknown])} "
                     "(rows count from 1 below the header)",
                     "write train, test or validation (validation counts as test)")
    rows: dict[str, dict[str, list[int]]] = {}
    for i, (label, split) in enumerate(zip(labels, splits, strict=True)):
        rows.setdefault(label, {}).setdefault(SPLITS[split], []).append(i + 1)
    both = [label for label in class_names if len(rows[label]) == 2]
    if both:
        named = "; ".join(f"{label!r} (train {_rows(rows[label]['train'])}, test "
                          f"{_rows(rows[label]['test'])})" for label in both[:_SHOWN])
        more = f"; and {len(both) - _SHOWN} more" if len(both) > _SHOWN else ""
        raise _error(root, f"puts {len(both)} label{'s' if len(both) > 1 else ''} in both the "
                     f"train and the test split, which must share no class: {named}{more} "
                     "(rows count from 1 below the header)",
                     "give each label one split")
    ids = {side: np.asarray([k for k, label in enumerate(class_names) if side in rows[label]],
                            dtype=np.int64) for side in ("train", "test")}
    for side, classes in ids.items():
        if classes.size < 2:
            raise _error(root, f"has {classes.size} class{'es' if classes.size != 1 else ''} in "
                         f"its {side} split", "each split needs images of at least 2 labels")
    return ids["train"], ids["test"]


# ---- the dataset --------------------------------------------------------------------------
@register_dataset(
    NAME,
    description="images listed in a .csv or .parquet table (columns path, label, split), as OML",
    needs_root=True,
    layout=LAYOUT,
)
def _build_table(*, root: str | None, image_size: int, seed: int) -> Dataset:
    del seed  # reading files is deterministic; the standard split needs no seed
    assert root is not None, "the registry checks that a root is given"
    started = time.perf_counter()
    paths, labels, splits = read_table(root)
    folder = os.path.dirname(os.path.abspath(root))
    _check_files(root, folder, paths)
    class_names = _class_order(labels)
    train, test = _split(root, labels, splits, class_names)
    ids = {name: k for k, name in enumerate(class_names)}
    files = FileImageSet(
        root=folder, files=np.asarray(paths, dtype=object),
        labels=np.asarray([ids[label] for label in labels], dtype=np.int64),
        class_names=tuple(class_names), transform=TransformSpec.for_size(image_size),
        dataset=NAME,
    )
    count = len(files)
    if count * 3 * image_size * image_size > _folder.MEMORY_BUDGET:
        logger.info("table: %d images of %d classes at %d px exceed the in-memory budget: "
                    "reading them from their files per batch", count, len(class_names),
                    image_size)
        return Dataset(name=NAME, images=files, train_classes=train, test_classes=test)
    images = np.empty((count, 3, image_size, image_size), dtype=np.uint8)
    for i in range(count):  # decoded and cropped as folder's in-memory images are
        images[i] = to_uint8(_folder.resize_center_crop(files.load(i), image_size))
    logger.info("read %d images of %d classes listed in %s in %.1fs", count, len(class_names),
                root, time.perf_counter() - started)
    in_memory = ImageSet(images=torch.from_numpy(images), labels=files.labels,
                         class_names=files.class_names)
    return Dataset(name=NAME, images=in_memory, train_classes=train, test_classes=test)
