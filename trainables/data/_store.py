"""The decoded-image store: a file-backed dataset's images decoded once per node, shared by trials.

Every trial of a search reads the same photos, and decoding a JPEG costs more CPU time than a
GPU's training step on it. So a :class:`~trainables.data.FileImageSet` is decoded **once**: every
image, upright (EXIF), in the set's mode, resized so that its shorter side is the evaluation
resize of the crop size (256 for 224 crops; torchvision's ``Resize(256)`` on the PIL image, so
evaluation's ``CenterCrop`` of a stored image is bit for bit the evaluation input of the decoded
file), stored as uint8 ``HWC`` rows of one flat file that every trial memory-maps. The pages live
once in the node's memory (the page cache, or ``/dev/shm``), however many trials read them.

**Two stores when crops come from the originals.** With ``train_crops=original`` (the transform's
:attr:`~trainables.data.TransformSpec.crops_from_original`) training crops are cut from the
full-size image, as with ``cache=off``; a second store then holds the images of the dataset's
*training classes* decoded at full size (no resize; nothing else is ever cropped for training),
and evaluation keeps reading the resized store. Both are shared with every other trial that needs
them (``train_crops=resized`` trials use the resized one only). On 11,788 CUB-like photos (up
to 500 x 375) the resized store takes 3.09 GB and the full-size one 2.83 GB (the 5,900 training
images; all of them would take 5.67 GB). Evaluating from full-size pixels instead would resize
every evaluated image with PIL on the host at every evaluation (19x the CPU time of cutting its
crop from the resized store, docs/benchmarks.md); the second store costs disk, not time.

**Where.** ``cache`` (a trial setting): ``auto`` = ``<cache folder>/decoded`` (``$DMLSEARCH_CACHE``
or ``~/.cache/dmlsearch``), ``shm`` = ``/dev/shm/dmlsearch-<user>`` (memory, gone at reboot),
any other text = that folder, ``off`` = no store (decode the files every epoch, as before).

**Keyed by content.** A store's name is a digest of the format, the mode and short side (or
``original``: a word no resized store's key contains), and every file's path with its size and
modification time (for a ``.zip``: each member's CRC-32 and size), so a changed, added or removed
file gives another store, and a later search on unchanged files opens the existing one without
decoding anything.

**Built once, never read half-written.** One process builds a store while holding an exclusive
``flock`` on ``<key>.lock``; others wait on the lock and then open what it built. The builder
decodes in a process pool into ``.<key>.building-<pid>/``, writes ``READY`` last and renames the
folder into place (atomic), so a store folder is complete or absent. Leftovers of a builder that
died (its hidden folder, its lock file) are removed by the next process that opens the folder, for
any store: a builder holds its store's lock while its folder exists, so a lock taken without
waiting means nobody builds (:func:`_sweep`); its decoding workers die with it, printing nothing
(:mod:`trainables.data._pool`). A folder this process cannot write in is one error naming it. A
file that cannot be decoded (a truncated JPEG whose header reads fine) stops the build with one
error naming it. The lock file is removed by its holder
when it is done (built, failed or found built), so none is left behind (see :func:`_locked`).

**Verified before it is trusted.** Opening a store checks what is cheap: ``READY`` holds the key,
``meta.json`` and ``index.npy`` parse and agree (one index row per file, offsets that follow
each other), and the pixel file's size is exactly what the index says (a file cut short by a
full disk or an interrupted copy, or an empty one, fails). A store that fails is removed and
built again, under the builder's lock, with one log line naming it and what was wrong; if it
cannot be, the error names the store, what was wrong and the fix (delete that folder, or
``cache=off``). Pixel *values* are not checksummed (that would read the whole file).

**Size.** Before decoding, the size is known from the image headers; a store that the folder's
free space (or ``cache_limit_gb``, which counts every store in the folder) cannot hold is an
error that says how much is needed and how to proceed. Under a limit, the stores used least
recently are removed first to make room; the stores other processes are building count (at
their full size) and are never removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import os
import re
import shutil
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from dmlsearch.trainables.config import SETTINGS
from dmlsearch.trainables.data._pool import chunks as _chunks
from dmlsearch.trainables.data._pool import run_chunks as _run
from dmlsearch.trainables.data._pool import workers as _workers
from dmlsearch.trainables.data._tree import decode_image
from dmlsearch.trainables.errors import UserError

__all__ = [
    "CACHE_CHOICES",
    "DamagedStore",
    "DecodedStore",
    "StoreStats",
    "check_decodes",
    "open_store",
    "resized_size",
    "size_text",
    "store_folder",
]

logger = logging.getLogger(__name__)

FORMAT = 1
READY = "READY"
PIXELS = "pixels.u8"
INDEX = "index.npy"
META = "meta.json"
LAST_USED = "last_used"
#: The ``cache`` setting's words, as its declaration gives them (``trainables/config.py``);
#: anything else is a folder.
CACHE_CHOICES: tuple[str, ...] = SETTINGS["cache"].choices
_EXIF_ORIENTATION = 0x0112
_SWAPPED = {5, 6, 7, 8}  # EXIF orientations that rotate by 90 degrees


def resized_size(width: int, height: int, short: int | None) -> tuple[int, int]:
    """``(width, height)`` after torchvision's ``Resize(short)`` (shorter side = ``short``, the
    other ``int(short * long / short_side)``); ``short`` ``None``: the size itself (full size)."""
    if short is None:
        return width, height
    if width <= height:
        return short, int(short * height / width)
    return int(short * width / height), short


def store_folder(cache: str) -> Path:
    """The folder of the stores for a ``cache`` setting other than ``off``."""
    if cache == "auto":
        from dmlsearch.trainables.data._cache import cache_dir

        return cache_dir() / "decoded"
    if cache == "shm":
        user = os.environ.get("USER") or str(os.getuid())
        return Path("/dev/shm") / f"dmlsearch-{user}"
    return Path(cache).expanduser()


@dataclass(frozen=True)
class StoreStats:
    """What opening a store cost: built now (and how many files were decoded) or found."""

    key: str
    built: bool
    decoded: int
    seconds: float
    bytes: int
    crop_key: str | None = None  # the full-size store's (train_crops=original), if opened

    def plus(self, crops: StoreStats) -> StoreStats:
        """These stats and those of the full-size store opened with them, summed."""
        return StoreStats(key=self.key, built=self.built or crops.built,
                          decoded=self.decoded + crops.decoded,
                          seconds=self.seconds + crops.seconds, bytes=self.bytes + crops.bytes,
                          crop_key=crops.key)


class DecodedStore:
    """A built store, memory-mapped read-only: ``image(row)`` is an ``[h, w, C]`` uint8 view.

    Attributes:
        folder: where it is.
        files: the file keys in row order (relative to the set's root, or archive members).
        heights, widths: each row's size.
        channels: 1 or 3.
        short: the shorter side every image was resized to; ``None``: stored at full size.
    """

    def __init__(self, folder: Path) -> None:
        """Open (and verify: :func:`_verify`) the store in ``folder``; a damaged one is a
        :class:`DamagedStore` error naming it, never a reshape or mmap traceback later."""
        self.folder = Path(folder)
        meta, index, size = _verify(self.folder)
        self.files: list[str] = list(meta["files"])
        self.channels = int(meta["channels"])
        self.short: int | None = None if meta["short"] is None else int(meta["short"])
        self.offsets, self.heights, self.widths = index[:, 0], index[:, 1], index[:, 2]
        self.pixels = np.memmap(self.folder / PIXELS, dtype=np.uint8, mode="r", shape=(size,))
        self._row = {name: i for i, name in enumerate(self.files)}

    def __len__(self) -> int:
        return len(self.files)

    def __reduce__(self) -> tuple[type, tuple[Path]]:  # pickled by its folder, never its pages
        return DecodedStore, (self.folder,)

    @property
    def nbytes(self) -> int:
        return int(self.pixels.shape[0])

    def rows(self, files: np.ndarray, *, missing: int | None = None) -> np.ndarray:
        """The rows of these file keys: every one must be in the store, unless ``missing`` is
        given (the row of a file that is not)."""
        if missing is None:
            return np.fromiter((self._row[str(f)] for f in files), dtype=np.int64,
                               count=len(files))
        return np.fromiter((self._row.get(str(f), missing) for f in files), dtype=np.int64,
                           count=len(files))

    def image(self, row: int) -> np.ndarray:
        """``[h, w, C]`` uint8, a view of the mapped pages (no copy)."""
        start, h, w = int(self.offsets[row]), int(self.heights[row]), int(self.widths[row])
        return self.pixels[start : start + h * w * self.channels].reshape(h, w, self.channels)


class DamagedStore(UserError):
    """A store folder whose files do not agree (``problem`` says how): see :func:`_verify`."""

    def __init__(self, folder: Path, problem: str) -> None:
        self.folder, self.problem = Path(folder), problem
        super().__init__(f"the decoded-image store {folder} is damaged ({problem}): delete that "
                         "folder to have it built again, or set cache=off")


def _verify(folder: Path) -> tuple[dict, np.ndarray, int]:
    """``(meta, index, pixel bytes)`` of the store in ``folder`` once what is cheap to check
    holds (the module's notes); else :class:`DamagedStore` saying what does not."""
    def damaged(problem: str) -> DamagedStore:
        return DamagedStore(folder, problem)

    try:
        ready = (folder / READY).read_text()
    except FileNotFoundError:
        raise damaged(f"it has no {READY} marker") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise damaged(f"its {READY} marker cannot be read: {_why(exc)}") from None
    if ready != folder.name:
        raise damaged(f"its {READY} marker does not hold its key")
    try:
        meta = json.loads((folder / META).read_text())
        files, channels = meta["files"], int(meta["channels"])
        if not isinstance(files, list) or channels not in (1, 3) or not (
                meta["short"] is None or int(meta["short"]) > 0):
            raise ValueError("unexpected values")
    except FileNotFoundError:
        raise damaged(f"its {META} is missing") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise damaged(f"its {META} cannot be read: {_why(exc)}") from None
    try:
        index = np.load(folder / INDEX, allow_pickle=False)
    except FileNotFoundError:
        raise damaged(f"its {INDEX} is missing") from None
    except (OSError, ValueError, EOFError) as exc:
        raise damaged(f"its {INDEX} cannot be read: {_why(exc)}") from None
    if index.dtype != np.int64 or index.ndim != 2 or index.shape[1] != 3:
        raise damaged(f"its {INDEX} is not an [N, 3] int64 table")
    if index.shape[0] != len(files):
        raise damaged(f"its {INDEX} has {index.shape[0]} rows for the {len(files)} files "
                      f"its {META} lists")
    lengths = index[:, 1] * index[:, 2] * channels
    expected = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(lengths) else lengths
    if (index[:, 1:] <= 0).any() or not np.array_equal(index[:, 0], expected):
        raise damaged(f"its {INDEX} has sizes or offsets that do not follow each other")
    need = max(int(lengths.sum()), 1)  # a build writes one byte at least (mmap needs one)
    try:
        size = os.stat(folder / PIXELS).st_size
    except FileNotFoundError:
        raise damaged(f"its pixel file {PIXELS} is missing") from None
    except OSError as exc:
        raise damaged(f"its pixel file {PIXELS} cannot be read: {_why(exc)}") from None
    if size < need:
        raise damaged(f"its pixel file {PIXELS} has {_size(size)} of the {_size(need)} its "
                      "index describes, cut short as by a full disk or an interrupted copy")
    if size > need:
        raise damaged(f"its pixel file {PIXELS} has {_size(size)}, more than the "
                      f"{_size(need)} its index describes")
    return meta, index, size


def _why(exc: BaseException) -> str:
    """An exception in a few words (an OS error's words without its number)."""
    words = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return words or type(exc).__name__


# ---- the key ----------------------------------------------------------------------------------
def store_key(root: str, files: np.ndarray, *, archive: bool, mode: str,
              short: int | None) -> str:
    """The content digest naming a store (see the module's notes)."""
    size = "original" if short is None else str(int(short))
    digest = hashlib.sha256(f"dmlsearch-decoded/{FORMAT}/{mode}/{size}\n".encode())
    if archive:
        with zipfile.ZipFile(root) as handle:
            info = {i.filename: i for i in handle.infolist()}
        for name in files:
            member = info.get(str(name))
            if member is None:
                raise UserError(f"cannot read image {root}!{name} (not in the archive): "
                                "restore that file or fix --data-root")
            digest.update(f"{name}\0{member.CRC}\0{member.file_size}\n".encode())
    else:
        for name in files:
            path = os.path.join(root, str(name))
            try:
                stat = os.stat(path)
            except OSError as exc:
                raise UserError(f"cannot read image {path} ({exc.strerror}): restore that file "
                                "or fix --data-root") from None
            digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


# ---- building ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Source:
    """Where the build reads its files (picklable for the decoding processes)."""

    root: str
    archive: bool
    mode: str
    dataset: str

    def describe(self, name: str) -> str:
        return f"{self.root}!{name}" if self.archive else os.path.join(self.root, name)

    def read(self, name: str) -> bytes:
        with self.open(name) as handle:
            return handle.read()

    @contextlib.contextmanager
    def open(self, name: str) -> Iterator[io.BufferedIOBase]:
        """The file as a stream (read lazily: a header costs a few KB)."""
        try:
            handle = (_zip(self.root).open(name) if self.archive
                      else open(os.path.join(self.root, name), "rb"))
        except (OSError, KeyError, zipfile.BadZipFile, EOFError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise UserError(f"{self.dataset}: cannot read image {self.describe(name)} "
                            f"({reason}): restore that file or fix --data-root") from None
        with handle:
            yield handle


_ZIPS: dict[tuple[str, int], zipfile.ZipFile] = {}


def _zip(path: str) -> zipfile.ZipFile:
    key = (path, os.getpid())  # one handle per process: a forked offset would be shared
    if key not in _ZIPS:
        _ZIPS[key] = zipfile.ZipFile(path)
    return _ZIPS[key]


def _header_size(source: _Source, name: str) -> tuple[int, int]:
    """``(width, height)`` of an image upright, from its header alone."""
    try:
        with source.open(name) as handle, Image.open(handle) as image:
            width, height = image.size
            if image.getexif().get(_EXIF_ORIENTATION) in _SWAPPED:
                width, height = height, width
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError, EOFError) as exc:
        raise UserError(f"{source.dataset}: cannot read image {source.describe(name)} "
                        f"({_unreadable(source, name, exc)}): replace or delete that file"
                        ) from None
    return width, height


#: PIL's "cannot identify image file <_io.BytesIO object at 0x...>": the repr names nothing.
_UNIDENTIFIED = re.compile(r"cannot identify image file <[^>]*>")


def _unreadable(source: _Source, name: str, exc: BaseException) -> str:
    """Why PIL could not read a file, in words (the message names the file itself)."""
    with contextlib.suppress(OSError, KeyError, zipfile.BadZipFile, UserError):
        if _file_size(source, name) == 0:
            return "the file is empty"
    return _UNIDENTIFIED.sub("not an image format PIL can read", str(exc))


def _file_size(source: _Source, name: str) -> int:
    if source.archive:
        return _zip(source.root).getinfo(name).file_size
    return os.path.getsize(os.path.join(source.root, name))


def _decode(source: _Source, name: str) -> Image.Image:
    """:func:`decode_image` of one file (its error names the file and says why in words)."""
    return decode_image(source.read(name), mode=source.mode, where=source.describe(name),
                        dataset=source.dataset)


def _headers(job: tuple[_Source, list[str]]) -> list[tuple[int, int]] | str:
    source, names = job
    try:
        return [_header_size(source, name) for name in names]
    except UserError as exc:
        return str(exc)


def decode_resized(source: _Source, name: str, short: int | None) -> np.ndarray:
    """One image decoded, upright, resized to shorter side ``short`` (``None``: as decoded):
    uint8 ``[h, w, C]``."""
    image = _decode(source, name)
    size = resized_size(image.width, image.height, short)
    if size != image.size:
        image = image.resize(size, Image.BILINEAR)  # what torchvision's F.resize does on PIL
    pixels = np.asarray(image, dtype=np.uint8)
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def _decode_into(job: tuple[_Source, str, list[tuple[int, str, int, int, int]], int | None]
                 ) -> str:
    """Decode a chunk of files into the pixel file at their offsets; '' or the error."""
    source, path, rows, short = job
    pixels = np.memmap(path, dtype=np.uint8, mode="r+")
    try:
        for _, name, offset, h, w in rows:
            image = decode_resized(source, name, short)
            if image.shape[:2] != (h, w):
                raise UserError(
                    f"{source.dataset}: image {source.describe(name)} decodes to "
                    f"{image.shape[1]}x{image.shape[0]} but its header says otherwise: "
                    "replace or delete that file")
            pixels[offset : offset + image.size] = image.reshape(-1)
        pixels.flush()
    except UserError as exc:
        return str(exc)
    finally:
        del pixels
    return ""


def _free_bytes(folder: Path) -> int:
    return shutil.disk_usage(folder).free


def _stores(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.is_dir() and (p / READY).is_file()]


def _store_bytes(store: Path) -> int:
    return sum(f.stat().st_size for f in store.iterdir() if f.is_file())


def _last_used(store: Path) -> float:
    marker = store / LAST_USED
    return marker.stat().st_mtime if marker.exists() else (store / READY).stat().st_mtime


def _make_room(folder: Path, need: int, limit: int, *, what: str, also: str,
               keep: frozenset[str]) -> None:
    """Remove the least recently used stores (but those named in ``keep``: the store opened with
    this one) until ``need`` more bytes fit under ``limit``; the stores other processes are
    building count, and are never removed."""
    stores = sorted(_stores(folder), key=_last_used)
    kept = sum(_store_bytes(s) for s in stores if s.name in keep)
    busy = _building_bytes(folder)
    if need + kept + busy > limit:
        beside = [f"the {_size(kept)} of the store it goes with"] if kept else []
        beside += [f"the {_size(busy)} of the stores other processes are building"] if busy else []
        raise UserError(
            f"{what} needs {_size(need)}{' besides ' + ' and '.join(beside) if beside else ''} "
            f"but cache_limit_gb allows {_size(limit)}; raise cache_limit_gb, {also}or set "
            "cache=off to decode the images every epoch instead")
    used = sum(_store_bytes(s) for s in stores) + busy
    stores = [s for s in stores if s.name not in keep]
    while stores and used + need > limit:
        victim = stores.pop(0)
        used -= _store_bytes(victim)
        logger.info("decoded store %s removed to stay under cache_limit_gb", victim)
        shutil.rmtree(victim, ignore_errors=True)  # mapped pages stay valid for their readers


def size_text(n: int) -> str:
    """Bytes in words: GiB down to 0.01 GiB, then MiB, KiB, bytes (never "0.00 GiB")."""
    for unit, scale, least in (("GiB", 2**30, 0.01 * 2**30), ("MiB", 2**20, 2**20),
                               ("KiB", 2**10, 2**10)):
        if n >= least:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} bytes"


_size = size_text


@contextlib.contextmanager
def _locked(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """An exclusive ``flock`` on ``path``, which is removed when the holder is done; yields
    whether it is held (always, unless ``wait`` is false and another process holds it: then it
    yields false at once and leaves the file alone). A folder where the lock file cannot be
    created is a user error naming it (see :func:`_unwritable`).

    Removing a lock file is safe only with this protocol, which every opener follows: a waiter
    that gets the lock checks that ``path`` still names the file it locked (same device and
    inode); if the holder removed it meanwhile (or removed it and another process created a new
    one), the waiter holds a lock nobody else will ever ask for, so it lets go and starts again
    on whatever ``path`` is now. Hence the holder may unlink ``path`` *while holding the lock*
    (never after letting go: a waiter could then lock the file after it was checked), and at
    most one process holds the lock on the file ``path`` names. A holder killed with SIGKILL
    leaves the file (the kernel releases the lock, not the name); the next holder removes it.
    A process of an older version (which does not check) could hold a removed file's lock
    beside a new holder: two builds of one store at once, one of which fails; a store is still
    never read half-written (it is renamed into place only when complete).
    """
    while True:
        try:
            handle = open(path, "a+")  # noqa: SIM115 (closed below, on every path)
        except OSError as exc:
            raise _unwritable(path.parent, exc) from None
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                same = os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
            except FileNotFoundError:
                same = False
            if not same:
                continue  # the finally below closes it (and so lets go)
            try:
                yield True
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # still holding it: see above
            return
        finally:
            handle.close()  # closing the last descriptor releases the flock


def _unwritable(folder: Path, exc: OSError) -> UserError:
    """The one-line error of a cache folder this process cannot write in."""
    return UserError(f"cannot write in the decoded-image cache folder {folder} ({_why(exc)}); "
                     "the stores need a folder this process can write in: set cache to another "
                     "(cache=/path, or cache=shm for /dev/shm), or cache=off to decode the "
                     "images every epoch instead")


def _build(folder: Path, key: str, source: _Source, files: list[str], short: int | None, *,
           limit: int | None, workers: int, what: str, also: str, keep: frozenset[str]) -> int:
    """Build the store ``key`` in ``folder`` (the caller holds its lock); bytes written."""
    for stale in [*folder.glob(f".{key}.building-*"), *folder.glob(f".{key}.damaged-*")]:
        shutil.rmtree(stale, ignore_errors=True)  # a builder that died: nobody else builds
    names = [str(f) for f in files]
    sizes: list[tuple[int, int]] = []
    for part in _run([(source, chunk) for chunk in _chunks(names, workers)], _headers, workers):
        if isinstance(part, str):
            raise UserError(part)
        sizes.extend(part)
    channels = 3 if source.mode == "RGB" else 1
    dims = [resized_size(w, h, short) for w, h in sizes]
    lengths = np.array([w * h * channels for w, h in dims], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    total = int(lengths.sum())
    if limit is not None:
        _make_room(folder, total, limit, what=what, also=also, keep=keep)
    free = _free_bytes(folder)
    if total + (64 << 20) > free:
        raise UserError(
            f"{what} needs {_size(total)} but {folder} has {_size(free)} free; free some space, "
            f"set cache to a folder with room (cache=/path, or cache=shm for /dev/shm), {also}"
            "or cache=off to decode the images every epoch instead")
    building = folder / f".{key}.building-{os.getpid()}"
    building.mkdir(parents=True)
    try:
        pixel_path = building / PIXELS
        with open(pixel_path, "wb") as handle:
            handle.truncate(max(total, 1))
        rows = [(i, names[i], int(offsets[i]), dims[i][1], dims[i][0])
                for i in range(len(names))]
        jobs = [(source, str(pixel_path), chunk, short) for chunk in _chunks(rows, workers)]
        for error in _run(jobs, _decode_into, workers):
            if error:
                raise UserError(error)
        index = np.stack([offsets, [d[1] for d in dims], [d[0] for d in dims]], axis=1)
        np.save(building / INDEX, index.astype(np.int64), allow_pickle=False)
        (building / META).write_text(json.dumps({
            "format": FORMAT, "dataset": source.dataset, "root": source.root,
            "mode": source.mode, "channels": channels, "short": short, "files": names,
            "built": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
        for path in building.iterdir():
            os.chmod(path, 0o644)  # readable by every user's trials
        with open(pixel_path, "rb+") as handle:
            os.fsync(handle.fileno())
        (building / READY).write_text(key)
        os.replace(building, folder / key)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return total


def open_store(root: str, files: np.ndarray, *, archive: bool, mode: str, short: int | None,
               dataset: str, cache: str, limit_gb: float = 0.0,
               workers: int | None = None, keep: frozenset[str] = frozenset()
               ) -> tuple[DecodedStore, StoreStats]:
    """The store of these files at shorter side ``short``: opened if built, else built first.

    Args:
        root, files, archive: the files, as a :class:`FileImageSet` holds them.
        mode: PIL mode of the stored pixels, ``"RGB"`` or ``"L"``.
        short: the shorter side after resizing; ``None``: full size (no resize).
        dataset: the dataset's name, for messages.
        cache: the ``cache`` setting (not ``off``).
        limit_gb: ``cache_limit_gb`` (0: no limit but the free space).
        workers: decoding processes (default: the CPUs this process may use).
        keep: keys of stores that making room under ``limit_gb`` must not remove.
    """
    started = time.perf_counter()
    folder = store_folder(cache)
    key = store_key(root, files, archive=archive, mode=mode, short=short)
    final = folder / key
    if short is None:
        what = (f"the full-size decoded store of {dataset} ({len(files)} training images, for "
                "train_crops=original)")
        also = "set train_crops=resized to crop the resized images (no second store), "
    else:
        what = f"the decoded store of {dataset} ({len(files)} images at shorter side {short})"
        also = ""
    built, total = False, 0
    _sweep(folder)  # what builders that died left: before it is counted or waited for
    store, problem = _open_checked(final, files)
    if store is None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create the decoded-image cache folder {folder} "
                            f"({exc.strerror}): set cache to a writable folder, or cache=off"
                            ) from None
        with _locked(folder / f"{key}.lock"):
            # again: somebody may have built (or repaired) it while this process waited
            store, problem = _open_checked(final, files)
            if store is None:
                if problem is not None:
                    _remove_damaged(folder, final, problem)
                source = _Source(root=str(root), archive=archive, mode=mode, dataset=dataset)
                limit = int(limit_gb * 2**30) if limit_gb else None
                logger.info("decoding %s into %s", what, final)
                try:
                    try:
                        total = _build(folder, key, source, list(files), short, limit=limit,
                                       workers=workers or _workers(), what=what, also=also,
                                       keep=keep | {key})
                    except OSError as exc:  # the folder's (its half-built store is removed)
                        raise _unwritable(folder, exc) from None
                except UserError as exc:
                    if problem is None:
                        raise
                    raise UserError(f"the decoded-image store {final} was damaged ({problem}) "
                                    f"and was removed; building it again failed: {exc}"
                                    ) from None
                built = True
                store = DecodedStore(final)  # a DamagedStore error if even a new one is not
    with contextlib.suppress(OSError):  # the precise clock: touch() takes the kernel's coarse
        marker, now = final / LAST_USED, time.time_ns()  # one, which ties stores used ms apart
        marker.touch()
        os.utime(marker, ns=(now, now))
    return store, StoreStats(key=key, built=built, decoded=len(files) if built else 0,
                             seconds=time.perf_counter() - started,
                             bytes=total or store.nbytes)


def _open_checked(final: Path, files: np.ndarray) -> tuple[DecodedStore | None, str | None]:
    """``(store, None)`` if ``final`` holds a sound store of ``files``; ``(None, None)`` if
    there is nothing there; ``(None, what is wrong)`` if what is there is damaged."""
    if not final.exists():
        return None, None
    try:
        store = DecodedStore(final)
    except DamagedStore as exc:
        return None, exc.problem
    if len(store.files) != len(files) or store.files != [str(f) for f in files]:
        return None, "it lists other files than those its key was made from"
    return store, None


def _remove_damaged(folder: Path, final: Path, problem: str) -> None:
    """Take a damaged store out of the way (the caller holds its lock), with one log line."""
    logger.warning("the decoded-image store %s is damaged (%s): removing it and building it "
                   "again", final, problem)
    aside = folder / f".{final.name}.damaged-{os.getpid()}"
    try:
        os.rename(final, aside)  # atomic: a reader opens the old folder or finds none
    except OSError as exc:
        raise UserError(f"the decoded-image store {final} is damaged ({problem}) and cannot be "
                        f"removed ({_why(exc)}): delete that folder, or set cache=off") from None
    shutil.rmtree(aside, ignore_errors=True)  # mapped pages stay valid for their readers


#: What builders leave in a store folder while they work: ``<key>.lock``, and the half-built
#: ``.<key>.building-<pid>`` or set-aside ``.<key>.damaged-<pid>`` folders.
_LEFTOVER = re.compile(r"^(?:\.(?P<folder>[0-9a-f]{32})\.(?:building|damaged)-\d+"
                       r"|(?P<lock>[0-9a-f]{32})\.lock)$")


def _sweep(folder: Path) -> None:
    """Remove what builders that died (``kill -9``, a machine reset) left in ``folder``: their
    half-built and set-aside folders and lock files. A builder holds its store's lock for as long
    as its folders exist, so a key whose lock this process gets without waiting has no builder
    left, and what it left is removed under that lock; a key being built is left alone. What
    this process may not remove (a shared cache it only reads) stays, silently."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    keys: dict[str, list[str]] = {}
    for name in names:
        found = _LEFTOVER.match(name)
        if found:
            keys.setdefault(found["folder"] or found["lock"], []).append(name)
    for key, leftovers in sorted(keys.items()):
        with contextlib.suppress(UserError, OSError), _locked(folder / f"{key}.lock",
                                                              wait=False) as held:
            for name in leftovers if held else ():
                if name.startswith("."):
                    logger.info("removing %s, left by a store builder that died", folder / name)
                    shutil.rmtree(folder / name, ignore_errors=True)
            # the lock file goes too: its holder (this process) removes it


def _building_bytes(folder: Path) -> int:
    """Bytes of the stores other processes are building in ``folder`` (what they will hold)."""
    return sum(_store_bytes(p) for p in folder.glob(".*.building-*") if p.is_dir())


def _decodes(job: tuple[_Source, list[str]]) -> str:
    source, names = job
    try:
        for name in names:
            _decode(source, name)
    except UserError as exc:
        return str(exc)
    return ""


def check_decodes(root: str, files: np.ndarray, *, archive: bool, mode: str, dataset: str,
                  workers: int | None = None) -> None:
    """Decode every file once (in parallel) and raise the first that fails: what ``cache=off``
    checks before a search, since no store build does it (``root``, ``files``, ``archive``,
    ``mode``, ``dataset`` as :func:`open_store` takes them)."""
    source = _Source(root=root, archive=archive, mode=mode, dataset=dataset)
    workers = workers or _workers()
    names = [str(f) for f in files]
    for error in _run([(source, chunk) for chunk in _chunks(names, workers)], _decodes,
                      workers):
        if error:
            raise UserError(error)
