"""What every kind of labelled set answers (:class:`LabelledItems`), and the class-level views
they share (:class:`ClassSelection`).

Images held in memory, file-backed photos and utterances are peers under this contract: a
:class:`~trainables.data.Dataset`, the protocols, the samplers, retrain and export ask only
these questions, and :class:`~trainables.data.BatchLoader` serves each set's batches. It imports
nothing of the package, so every kind of set can build on it without importing the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar
from typing import Protocol
from typing import Self
from typing import runtime_checkable

import numpy as np

__all__ = ["ClassSelection", "LabelledItems"]


@runtime_checkable
class LabelledItems(Protocol):
    """Labelled items of one input kind (``input_kind``: a name of
    :mod:`trainables.input_kinds`): labels are dataset-wide class ids, so a subset's ``labels``
    still index ``class_names``; ``channels`` is what a trunk takes as input channels."""

    input_kind: ClassVar[str]
    labels: np.ndarray
    class_names: tuple[str, ...]

    def __len__(self) -> int: ...

    @property
    def channels(self) -> int: ...

    @property
    def num_classes(self) -> int: ...

    def subset(self, indices: np.ndarray) -> Self: ...

    def classes(self) -> np.ndarray: ...

    def select_classes(self, classes: Sequence[int] | np.ndarray) -> Self: ...


class ClassSelection:
    """Class-level views shared by every kind of set (``labels``, ``subset``)."""

    labels: np.ndarray
    class_names: tuple[str, ...]

    def subset(self, indices: np.ndarray) -> Self:  # pragma: no cover - defined by subclasses
        raise NotImplementedError

    def classes(self) -> np.ndarray:
        """Sorted unique class ids present in this set."""
        return np.unique(self.labels)

    def select_classes(self, classes: Sequence[int] | np.ndarray) -> Self:
        """All items whose label is in ``classes``, in their original order."""
        wanted = np.asarray(classes, dtype=np.int64).reshape(-1)
        if wanted.size and (wanted.min() < 0 or wanted.max() >= len(self.class_names)):
            raise ValueError(
                f"class ids must lie in 0..{len(self.class_names) - 1}, got "
                f"{wanted.min()}..{wanted.max()}"
            )
        return self.subset(np.flatnonzero(np.isin(self.labels, wanted)))
