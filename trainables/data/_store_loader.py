"""Batches of a file-backed set from its decoded store, augmented on the compute device.

For each batch a background thread draws the boxes (:mod:`trainables.data._augment`), cuts them
out of the memory-mapped store into a (pinned, on CUDA) buffer and hands it over; the consuming
thread copies it to the device without waiting and resamples, flips and rounds there. The host's
work per image is one strided copy of its crop (no decoding, no resampling), so one thread feeds
a GPU, and a trial needs at most two CPU cores (its own and this thread).

**Which pixels.** Evaluation cuts its centre crops from the resized store (the evaluation input of
the decoded file, bit for bit). Training cuts its crops from the image the transform names
(:func:`~trainables.data._transforms.train_source`): the full-size store with
``train_crops=original``, the resized store with ``resized``, the same pixels ``cache=off``
crops. The boxes come from the same distribution as there; the resampling is torchvision's tensor
kernel on a CPU (within one grey level of the PIL kernel ``cache=off`` uses) and ``roi_align`` on
a GPU (see :mod:`trainables.data._augment`).

**Randomness.** The boxes and flips of an epoch come from ``np.random.default_rng((seed,
index))``, ``index`` the epoch's number when the caller gives one (the fit loop does), else a
count of this loader's epochs: a trial resumed from a checkpoint at epoch e draws the crops of
epoch e + 1 that an uninterrupted run draws. Evaluation is deterministic.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from dmlsearch.trainables.data import _augment as aug
from dmlsearch.trainables.data._fileset import FileImageSet
from dmlsearch.trainables.errors import UserError

__all__ = ["StoreLoader"]

_DEPTH = 3  # batches cut ahead of the one being consumed


@dataclass
class _Buffer:
    host: torch.Tensor  # uint8 [capacity] (pinned on CUDA)
    copied: torch.cuda.Event | None = None  # the device copy that last read it


@dataclass
class _Cut:
    buffer: _Buffer
    shape: tuple[int, int, int, int]  # [B, H, W, C] used at the start of the buffer
    sizes: np.ndarray  # [B, 2] (h, w) of each crop
    flips: np.ndarray | None  # bool [B]
    exact: bool  # every crop size x size: nothing to resample
    labels: np.ndarray


class StoreLoader:
    """The :class:`~trainables.data.SetLoader` of a store-backed :class:`FileImageSet`."""

    def __init__(self, images: FileImageSet, *, train: bool, seed: int,
                 device: torch.device) -> None:
        assert images.store is not None and images.rows is not None, "a store-backed set"
        self.images, self.train, self.seed = images, train, int(seed)
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.size = images.transform.size
        self.mode = images.transform.train_mode if train else "none"
        self.source, self.source_rows = images.store, images.rows  # where crops are cut from
        if train and images.transform.crops_from_original:
            if images.crop_store is None:
                raise ValueError("training crops of the original images need the full-size "
                                 "store: open the dataset with attach_store")
            self.source, self.source_rows = images.crop_store, images.crop_rows
        self._epochs = 0
        self._free: queue.Queue[_Buffer] = queue.Queue()
        for _ in range(_DEPTH + 1):
            self._free.put(_Buffer(host=torch.empty(0, dtype=torch.uint8)))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready: queue.Queue | None = None

    # ---- host side (the thread) ------------------------------------------------------------
    def _boxes(self, rows: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
        heights, widths = self.source.heights[rows], self.source.widths[rows]
        if self.mode == "rrc":
            return aug.rrc_boxes(heights, widths, rng)
        if self.mode == "resize_crop":
            return aug.random_crop_boxes(heights, widths, self.size, rng)
        return aug.center_boxes(heights, widths, self.size)

    def _take(self, nbytes: int) -> _Buffer:
        buffer = self._free.get()
        if buffer.copied is not None:
            buffer.copied.synchronize()  # the device has read it: it may be overwritten
            buffer.copied = None
        if buffer.host.numel() < nbytes:
            grown = max(nbytes, int(buffer.host.numel() * 1.25))
            buffer.host = torch.empty(grown, dtype=torch.uint8, pin_memory=self.cuda)
        return buffer

    def _cut(self, index: np.ndarray, rng: np.random.Generator | None) -> _Cut:
        store = self.source
        rows = self.source_rows[index]
        if rows.min() < 0:
            absent = int(index[int(np.argmin(rows))])
            raise UserError(
                f"{self.images.dataset}: image {self.images.describe(absent)} is not in the "
                "full-size store of the training classes, so it cannot be cropped for training "
                "(train_crops=original): train on the dataset's training classes only")
        boxes = self._boxes(rows, rng)
        flips = rng.random(len(rows)) < 0.5 if rng is not None else None
        exact = self.mode != "rrc"
        height, width = aug.padded_shape(boxes, exact=exact)
        shape = (len(rows), height, width, store.channels)
        buffer = self._take(int(np.prod(shape)))
        out = buffer.host[: int(np.prod(shape))].numpy().reshape(shape)
        aug.cut_crops([store.image(int(r)) for r in rows], boxes, out, exact=exact)
        return _Cut(buffer=buffer, shape=shape, sizes=boxes[:, 2:].copy(), flips=flips,
                    exact=exact, labels=self.images.labels[index])

    def _produce(self, batches: list[np.ndarray], rng: np.random.Generator | None,
                 out: queue.Queue) -> None:
        try:
            for index in batches:
                if self._stop.is_set():
                    return
                out.put(self._cut(index, rng))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            out.put(exc)
            return
        out.put(None)

    # ---- device side -----------------------------------------------------------------------
    def _finish(self, cut: _Cut) -> tuple[torch.Tensor, torch.Tensor]:
        count = int(np.prod(cut.shape))
        host = cut.buffer.host[:count].view(cut.shape)
        if self.cuda:
            crops = host.to(self.device, non_blocking=True)
            cut.buffer.copied = torch.cuda.Event()
            cut.buffer.copied.record()
        else:
            crops = host
        flips = None if cut.flips is None else torch.from_numpy(cut.flips).to(
            self.device, non_blocking=True)
        x = aug.resize_crops(crops, cut.sizes, self.size, flips)
        if not self.cuda and x.data_ptr() == host.data_ptr():
            x = x.clone()  # a view of the buffer, which the thread is about to reuse
        labels = torch.from_numpy(cut.labels)
        self._free.put(cut.buffer)
        return x, labels

    def epoch(self, batches: list[np.ndarray], index: int | None = None
              ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(uint8 [B, C, size, size] on the device, int64 [B] labels)`` per index array."""
        self.close_epoch()
        number = self._epochs if index is None else int(index)
        self._epochs += 1
        rng = np.random.default_rng((self.seed, number)) if self.train else None
        ready: queue.Queue = queue.Queue(maxsize=_DEPTH)
        self._ready = ready
        self._stop.clear()
        self._thread = threading.Thread(target=self._produce, args=(batches, rng, ready),
                                        name="dmlsearch-batches", daemon=True)
        self._thread.start()
        return self._consume(ready)

    def _consume(self, ready: queue.Queue) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            item = ready.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield self._finish(item)

    def close_epoch(self) -> None:
        """Stop the thread of an epoch that was not consumed to its end."""
        thread, self._thread = self._thread, None
        ready, self._ready = self._ready, None
        if thread is None:
            return
        self._stop.set()
        while thread.is_alive():
            # it may be blocked handing over a batch nobody takes, or waiting for a buffer
            while ready is not None and not ready.empty():
                item = ready.get_nowait()
                if isinstance(item, _Cut):
                    self._free.put(item.buffer)
            if self._free.empty():
                self._free.put(_Buffer(host=torch.empty(0, dtype=torch.uint8)))
            thread.join(timeout=0.05)
        while ready is not None and not ready.empty():  # what it handed over last
            item = ready.get_nowait()
            if isinstance(item, _Cut):
                self._free.put(item.buffer)

    def close(self) -> None:
        self.close_epoch()
