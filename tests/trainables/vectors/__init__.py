"""A third input kind, for tests only: fixed-length vectors read from a NumPy file.

It shows what a kind is: this one folder (its items, their reader and batches, the model's input
transform, a backbone that takes them) and one :class:`~dmlsearch.trainables.input_kinds.InputKind`
entry; nothing of the package changes. :func:`register` adds the kind, the ``vectors_npz``
dataset (a ``.npz`` file holding ``vectors`` float ``[N, D]`` and ``labels`` int ``[N]``) and the
``mlp`` backbone to the registries; a search's worker processes run it at start (Ray's
``worker_process_setup_hook``), as the driver did.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from dmlsearch.trainables.data import ClassSelection
from dmlsearch.trainables.data import Dataset
from dmlsearch.trainables.data import dataset_names
from dmlsearch.trainables.data import register_dataset
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.input_kinds import INPUT_KINDS
from dmlsearch.trainables.input_kinds import InputKind
from dmlsearch.trainables.input_kinds import ModelInput
from dmlsearch.trainables.input_kinds import register_input_kind
from dmlsearch.trainables.models import BACKBONES
from dmlsearch.trainables.models import register_backbone

__all__ = ["BACKBONE", "DATASET", "KIND", "VectorSet", "register", "write_vectors"]

KIND, DATASET, BACKBONE = "vectors", "vectors_npz", "mlp"
LAYOUT = "a .npz file holding vectors (float [N, D]) and labels (int [N])"
_HIDDEN = 32


@dataclasses.dataclass(frozen=True, eq=False)
class VectorSet(ClassSelection):
    """Labelled vectors held in memory: float32 ``[N, D]``; ``channels`` is ``D``."""

    vectors: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]

    input_kind: ClassVar[str] = KIND

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def channels(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def subset(self, indices: np.ndarray) -> VectorSet:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        return VectorSet(self.vectors[idx], self.labels[idx], self.class_names)

    def batch_loader(self, *, train: bool, workers: int, seed: int,
                     device: torch.device) -> _Loader:
        """Its batches (the hook :class:`~dmlsearch.trainables.data.BatchLoader` serves)."""
        return _Loader(self)


class _Loader:
    """``(float32 [B, D] vectors, int64 [B] labels)`` per index array; nothing to augment."""

    def __init__(self, items: VectorSet) -> None:
        self.items = items

    def epoch(self, batches: list[np.ndarray]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for idx in batches:
            yield (torch.from_numpy(self.items.vectors[idx]),
                   torch.from_numpy(self.items.labels[idx]))

    def close(self) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class VectorInput:
    """The kind's model input transform: vectors ``[B, D]`` as float32."""

    def __call__(self, vectors: torch.Tensor) -> torch.Tensor:
        if vectors.ndim != 2:
            raise UserError(f"expected vectors [B, D]; got shape {tuple(vectors.shape)}")
        return vectors.to(torch.float32)


def vector_input(spec: Any) -> VectorInput:
    """``input_transform`` of the kind (a pixel convention does not apply)."""
    return VectorInput()


def open_vectors(dataset: Dataset, cfg: Any, *, check_files: bool) -> tuple[Dataset, None]:
    """``open`` of the kind: vectors are read whole when the dataset loads; no store."""
    return dataset, None


class _MLP(nn.Module):
    """Two linear layers; ``[B, D]`` → ``[B, 32, 1]`` (the head pools every axis after C)."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_channels, _HIDDEN), nn.ReLU(),
                                 nn.Linear(_HIDDEN, _HIDDEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).unsqueeze(-1)


def _mlp(*, in_channels: int) -> tuple[nn.Module, int]:
    return _MLP(in_channels), _HIDDEN


def _read(*, root: str | None, image_size: int | None, seed: int) -> Dataset:
    if root is None or not os.path.isfile(root):
        raise UserError(f"{DATASET}: expected --data-root to be {LAYOUT}; got {root}")
    with np.load(root) as data:
        vectors = np.asarray(data["vectors"], dtype=np.float32)
        labels = np.asarray(data["labels"], dtype=np.int64)
    names = tuple(f"class {k}" for k in range(int(labels.max()) + 1))
    return Dataset.with_standard_split(name=DATASET,
                                       images=VectorSet(vectors, labels, names))


def write_vectors(path: str | os.PathLike[str], *, classes: int = 16, per_class: int = 12,
                  dim: int = 8, seed: int = 0) -> str:
    """A ``.npz`` of separable classes: each a Gaussian around its own centre."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim)) * 3
    labels = np.repeat(np.arange(classes), per_class)
    vectors = centres[labels] + rng.normal(size=(labels.size, dim))
    np.savez(path, vectors=vectors.astype(np.float32), labels=labels)
    return os.fspath(path)


def register() -> None:
    """Add the kind, its dataset and its backbone to the registries (once per process)."""
    if KIND not in INPUT_KINDS:
        here = __name__
        register_input_kind(InputKind(
            name=KIND, items="vectors",
            model_input=ModelInput("float32", "vectors", (("D", "channels"),)),
            batch="float32 vectors [B, D]", preview_dataset=DATASET,
            datasets=(DATASET,), backbones=(BACKBONE,),
            input_transform=f"{here}:vector_input", open=f"{here}:open_vectors"))
    if DATASET not in dataset_names():
        register_dataset(DATASET, description="test-only vectors from a NumPy file",
                         needs_root=True, layout=LAYOUT, input_kind=KIND)(_read)
    if BACKBONE not in BACKBONES:
        register_backbone(BACKBONE, description="two linear layers (test-only vectors)",
                          input_kind=KIND)(_mlp)
