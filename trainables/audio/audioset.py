"""Labelled utterances (:class:`AudioSet`) and the batches of features they serve.

An :class:`AudioSet` is to audio what :class:`~trainables.data.FileImageSet` is to photos: file
names plus speaker labels, answering the questions every protocol and sampler asks (``labels``,
``class_names``, ``len``, ``subset``, ``classes``, ``select_classes``, ``num_classes``) plus
``channels`` (the feature dimension) and ``input_kind`` = ``"audio"``. Its batches come out of
its own ``batch_loader`` (the hook :class:`~trainables.data.BatchLoader` serves), as float32
features ``[B, n_features, T]``:

* **training** (the source's reference code, ``asv/``): every utterance of the batch is a random
  crop of ``L`` frames of its features (an utterance shorter than ``L`` is repeated until it is
  long enough, App. A.3.2), where ``L`` is drawn once per batch uniformly from
  ``[max_frames / 4, max_frames)``: the reference crops to ``max_frames`` and then cuts the whole
  batch to such a random length; cropping to the cut length directly gives the same
  distribution of windows. The random draws come from one generator seeded with the loader's
  ``seed``, in this process, so any number of workers gives the same batches;
* **evaluation**: every utterance at its full length, once (the source's ``eval.py``), repeated
  to at least :data:`MIN_EVAL_FRAMES` frames. Utterances differ in length, so an index array is
  served as one batch of packed :class:`~trainables.models.Utterances` (their frames one after
  another, and their lengths), in order; the TDNN embeds them in padded, masked passes.

Features (:func:`trainables.audio.features.extract`: MFCC or fbank, sliding CMN, VAD) are
computed from the waveform the first time an utterance is needed and kept in memory, within
:data:`FEATURE_MEMO_BYTES` per process (a trial's folds and evaluations reuse them; a corpus
larger than that is computed again per epoch past the budget: 60 s of audio take about 0.04 s of
one core). With ``workers > 0`` a ``torch.utils.data.DataLoader`` computes them in worker
processes. ``trials`` is the dataset's trial list, kept by subsets; :meth:`AudioSet.listed_pairs`
gives its pairs as positions when every listed utterance is in the set.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING
from typing import ClassVar
from typing import cast

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data import Sampler

from dmlsearch.trainables.audio.features import FeatureSpec
from dmlsearch.trainables.audio.features import extract
from dmlsearch.trainables.audio.io import read_audio
from dmlsearch.trainables.data._batches import stop_workers
from dmlsearch.trainables.data._items import ClassSelection
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.models import Utterances

if TYPE_CHECKING:
    from dmlsearch.trainables.audio.trials import TrialList

__all__ = ["FEATURE_MEMO_BYTES", "MIN_EVAL_FRAMES", "AudioLoader", "AudioSet"]

#: Features kept in memory per process (float32): about 12 hours of 30-MFCC frames.
FEATURE_MEMO_BYTES = 512 << 20
#: An evaluated utterance shorter than this is repeated to this many frames (reference eval.py).
MIN_EVAL_FRAMES = 100
#: Shortest training crop: the TDNN's receptive field needs a few frames, its pooling two.
MIN_TRAIN_FRAMES = 16

Batch = tuple["torch.Tensor | Utterances", torch.Tensor]


class _Memo:
    """Features by (root, file, spec) within a byte budget; first come, first kept."""

    def __init__(self, budget: int) -> None:
        self.budget, self.used = budget, 0
        self.items: dict[tuple[str, str, FeatureSpec], torch.Tensor] = {}
        self.lock = threading.Lock()

    def get(self, key: tuple[str, str, FeatureSpec]) -> torch.Tensor | None:
        return self.items.get(key)

    def put(self, key: tuple[str, str, FeatureSpec], value: torch.Tensor) -> None:
        size = value.numel() * value.element_size()
        with self.lock:
            if key not in self.items and self.used + size <= self.budget:
                self.items[key] = value
                self.used += size


_MEMO = _Memo(FEATURE_MEMO_BYTES)


@dataclasses.dataclass(frozen=True, eq=False)
class AudioSet(ClassSelection):
    """Labelled audio files, turned into features on demand.

    Attributes:
        root: the folder ``files`` are relative to.
        files: object array ``[N]`` of paths relative to ``root``; they are also the utterance
            ids a trial list names (VoxCeleb: ``id10270/x6uYqmx31kE/00001.wav``).
        labels: int64 ``[N]`` speaker ids ``0..K-1`` of the whole dataset.
        class_names: ``class_names[label]`` is the speaker's name.
        features: how a waveform becomes features.
        max_frames: longest training crop in frames (the source's "maximum duration").
        trials: the dataset's trial list (its test speakers' listed pairs), or None.
        dataset: the dataset's name, for messages.
    """

    root: str
    files: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]
    features: FeatureSpec = FeatureSpec()
    max_frames: int = 300
    trials: TrialList | None = None
    dataset: str = "audio"

    input_kind: ClassVar[str] = "audio"

    def __post_init__(self) -> None:
        files = np.asarray(self.files, dtype=object).reshape(-1)
        labels = np.asarray(self.labels)
        if labels.ndim != 1 or labels.shape[0] != files.shape[0]:
            raise ValueError(f"AudioSet.labels must have shape [{files.shape[0]}], got "
                             f"{labels.shape}")
        if labels.size and not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"AudioSet.labels must be integers, got {labels.dtype}")
        labels = labels.astype(np.int64, copy=False)
        class_names = tuple(self.class_names)
        if labels.size and (labels.min() < 0 or labels.max() >= len(class_names)):
            raise ValueError(f"AudioSet.labels must lie in 0..{len(class_names) - 1}, got "
                             f"{labels.min()}..{labels.max()}")
        if not isinstance(self.max_frames, int) or self.max_frames < MIN_TRAIN_FRAMES:
            raise UserError(f"max_frames must be an integer >= {MIN_TRAIN_FRAMES}, got "
                            f"{self.max_frames!r}; set e.g. max_frames=300")
        object.__setattr__(self, "root", os.fspath(self.root))
        object.__setattr__(self, "files", files)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "class_names", class_names)

    # ---- what image sets also answer ----------------------------------------------------
    def __len__(self) -> int:
        return int(self.files.shape[0])

    def __repr__(self) -> str:
        return (f"AudioSet({len(self)} utterances, {len(self.classes())} speakers, "
                f"{self.features.n_features} {self.features.kind} from {self.root})")

    @property
    def channels(self) -> int:
        """The feature dimension (what a 1-D convolutional trunk takes as channels)."""
        return self.features.n_features

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def subset(self, indices: np.ndarray) -> AudioSet:
        idx = np.asarray(indices)
        if idx.dtype == np.bool_:
            raise ValueError("AudioSet.subset takes integer positions; use np.flatnonzero(mask)")
        idx = idx.astype(np.int64, copy=False).reshape(-1)
        return dataclasses.replace(self, files=self.files[idx], labels=self.labels[idx])

    # ---- audio ------------------------------------------------------------------------------
    def with_options(self, *, features: FeatureSpec | None = None,
                     max_frames: int | None = None) -> AudioSet:
        """The same utterances with other features or another training crop."""
        return dataclasses.replace(
            self, features=self.features if features is None else features,
            max_frames=self.max_frames if max_frames is None else int(max_frames))

    def path(self, index: int) -> str:
        return os.path.join(self.root, str(self.files[index]))

    def read(self, index: int) -> np.ndarray:
        """The waveform of utterance ``index``: int16 ``[samples]`` at the features' rate."""
        return read_audio(self.path(index), sample_rate=self.features.sample_rate,
                          dataset=self.dataset)

    def features_of(self, index: int) -> torch.Tensor:
        """float32 ``[n_features, frames]`` of utterance ``index`` (memoised per process)."""
        key = (self.root, str(self.files[index]), self.features)
        found = _MEMO.get(key)
        if found is not None:
            return found
        wave = self.read(index)
        if wave.size < self.features.frame_length:
            raise UserError(f"{self.dataset}: {self.path(index)} holds {wave.size} samples, "
                            f"shorter than one {self.features.frame_ms:g} ms frame; remove it")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # small tensors: extra threads only wait (10x slower on a
        try:  # busy machine); setting it costs under a microsecond
            feats = extract(torch.from_numpy(wave.astype(np.float32)), self.features)
        finally:
            torch.set_num_threads(threads)
        _MEMO.put(key, feats)
        return feats

    def whole(self, index: int) -> torch.Tensor:
        """What evaluation embeds of utterance ``index``: its features whole, repeated to at
        least :data:`MIN_EVAL_FRAMES` frames (the reference's ``eval.py``)."""
        feats = self.features_of(index)
        if feats.shape[1] < MIN_EVAL_FRAMES:
            return _fit_length(feats, MIN_EVAL_FRAMES, 0.0)
        return feats

    def listed_pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The trial list as (enrol positions, test positions, same-speaker flags) in this set,
        or None when there is no list or some listed utterance is not in this set."""
        if self.trials is None:
            return None
        return self.trials.positions(self.files)

    def batch_loader(self, *, train: bool, workers: int, seed: int,
                     device: torch.device) -> AudioLoader:
        """The :class:`~trainables.data.SetLoader` of this set (the BatchLoader hook)."""
        return AudioLoader(self, train=train, workers=workers, seed=seed, device=device)


# ---- batches ----------------------------------------------------------------------------------


def _fit_length(feats: torch.Tensor, length: int, offset: float) -> torch.Tensor:
    """A ``length``-frame window of ``feats`` at relative ``offset`` in [0, 1), the utterance
    repeated first when it is shorter."""
    frames = feats.shape[1]
    if frames < length:
        feats = feats.repeat(1, -(-length // frames))
        frames = feats.shape[1]
        offset = 0.0
    start = int(offset * (frames - length + 1))
    return feats[:, start:start + length]


class _Items(torch.utils.data.Dataset):
    """Map-style dataset over planned items: ``(index, length, offset)`` → a training crop;
    ``(index, 0, 0)`` → the whole utterance (repeated to :data:`MIN_EVAL_FRAMES`)."""

    def __init__(self, audio: AudioSet) -> None:
        self.audio = audio

    def __len__(self) -> int:
        return len(self.audio)

    def __getitem__(self, item: tuple[int, int, float]) -> torch.Tensor | str:
        index, length, offset = item
        try:
            if not length:
                return self.audio.whole(index)
            return _fit_length(self.audio.features_of(index), length, offset)
        except UserError as exc:
            return str(exc)


def _as_list(items: list[torch.Tensor | str]) -> list[torch.Tensor | str]:
    return items


class _Plan(Sampler[list[tuple[int, int, float]]]):
    def __init__(self) -> None:
        self.batches: list[list[tuple[int, int, float]]] = []

    def __iter__(self) -> Iterator[list[tuple[int, int, float]]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class AudioLoader:
    """Batches of features of one :class:`AudioSet` in one role (see the module's notes)."""

    def __init__(self, audio: AudioSet, *, train: bool, workers: int, seed: int,
                 device: torch.device) -> None:
        self.audio, self.train = audio, bool(train)
        self.rng = np.random.default_rng(int(seed) % 2**63)
        self.pin = torch.device(device).type == "cuda" and torch.cuda.is_available()
        self._items = _Items(audio)
        self._plan = _Plan()
        self._loader: DataLoader | None = None
        if workers > 0:
            self._loader = DataLoader(self._items, batch_sampler=self._plan, num_workers=workers,
                                      collate_fn=_as_list, persistent_workers=True,
                                      prefetch_factor=2)

    def _planned(self, batch: np.ndarray) -> list[tuple[int, int, float]]:
        if not self.train:
            return [(int(i), 0, 0.0) for i in batch]
        low = max(MIN_TRAIN_FRAMES, self.audio.max_frames // 4)
        length = int(self.rng.integers(low, max(low + 1, self.audio.max_frames)))
        offsets = self.rng.random(len(batch))
        return [(int(i), length, float(u)) for i, u in zip(batch, offsets)]

    def epoch(self, batches: list[np.ndarray]) -> Iterator[Batch]:
        plans = [self._planned(np.asarray(b)) for b in batches]  # drawn now: any worker count
        if self._loader is None:
            results: Iterator[list[torch.Tensor | str]] = (
                [self._items[item] for item in plan] for plan in plans)
        else:
            self._plan.batches = plans
            results = iter(self._loader)
        return self._batches(batches, results)

    def _batches(self, batches: list[np.ndarray],
                 results: Iterator[list[torch.Tensor | str]]) -> Iterator[Batch]:
        for batch, items in zip(batches, results):
            for item in items:
                if isinstance(item, str):
                    raise UserError(item)
            y = torch.from_numpy(self.audio.labels[np.asarray(batch)])
            crops = cast("list[torch.Tensor]", items)
            # training: crops of one length; evaluation: whole utterances, packed
            x = torch.stack(crops) if self.train else Utterances.pack(crops)
            if self.pin:
                x, y = x.pin_memory(), y.pin_memory()
            yield x, y

    def close(self) -> None:
        loader, self._loader = self._loader, None
        stop_workers(loader)
