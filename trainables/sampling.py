"""Batch samplers by name: which image indices make up each batch of an epoch.

``m_per_class`` draws ``batch_size / m`` distinct classes per batch and ``m`` images of each
(the balanced sampling MultiSimilarity needs, Psomas 2020 §3.4). Unlike pytorch-metric-learning's
``MPerClassSampler`` it draws from its own seeded ``numpy.random.Generator`` (no global RNG, so a
trial is reproducible wherever it runs), cycles through each class's images so every image is
seen about once per epoch, and reports impossible settings as user errors instead of asserts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Iterator

import numpy as np

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.registry import Registry

__all__ = ["BATCH_SAMPLERS", "SamplerInfo", "make_batches"]

BatchFn = Callable[[np.ndarray, int, int, np.random.Generator], Iterator[np.ndarray]]


@dataclasses.dataclass(frozen=True)
class SamplerInfo:
    name: str
    batches: BatchFn


BATCH_SAMPLERS: Registry[SamplerInfo] = Registry("batch sampler", option="batch_sampler")


def _register(name: str) -> Callable[[BatchFn], BatchFn]:
    return BATCH_SAMPLERS.register(name, lambda fn: SamplerInfo(name=name, batches=fn))


@_register("random")
def _random(
    labels: np.ndarray, batch_size: int, m: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    del m
    order = rng.permutation(len(labels))
    for start in range(0, len(order) - batch_size + 1, batch_size):
        yield order[start : start + batch_size]


@_register("m_per_class")
def _m_per_class(
    labels: np.ndarray, batch_size: int, m: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    classes, inverse = np.unique(labels, return_inverse=True)
    per_batch = batch_size // m
    if per_batch > len(classes):
        raise UserError(
            f"batch_size {batch_size} with m_per_class {m} needs {per_batch} classes per batch, "
            f"but the training split has only {len(classes)}; lower batch_size or raise m_per_class"
        )
    pools = [rng.permutation(np.flatnonzero(inverse == c)) for c in range(len(classes))]
    cursor = np.zeros(len(classes), dtype=np.int64)
    order = np.empty(0, dtype=np.int64)
    for _ in range(len(labels) // batch_size):
        if len(order) < per_batch:
            order = np.concatenate([order, rng.permutation(len(classes))])
        chosen, order = order[:per_batch], order[per_batch:]
        batch = []
        for c in chosen:
            pool = pools[c]
            take = [pool[(cursor[c] + j) % len(pool)] for j in range(m)]
            cursor[c] += m
            if cursor[c] >= len(pool):  # a full pass over this class: reshuffle it
                pools[c] = rng.permutation(pool)
                cursor[c] = 0
            batch.extend(take)
        yield np.asarray(batch, dtype=np.int64)


def make_batches(
    name: str, labels: np.ndarray, *, batch_size: int, m: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """Index batches for one epoch over ``labels`` (``len(labels) // batch_size`` of them)."""
    if len(labels) < batch_size:
        raise UserError(
            f"batch_size {batch_size} is larger than the training split ({len(labels)} images); "
            "lower batch_size"
        )
    return BATCH_SAMPLERS.get(name).batches(labels, batch_size, m, rng)
