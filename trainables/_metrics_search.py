"""faiss exact kNN in query chunks, exact first-partner ranks, and k-means (private helper).

Used by :func:`trainables.metrics.retrieval_metrics`. Nothing here builds an ``N x N`` matrix:
the kNN search goes through faiss in chunks of queries, and the rank pass holds one
``chunk x N`` block of scores at a time (about 64 MiB by default).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager

import faiss
import numpy as np

__all__ = [
    "CHUNK_BYTES",
    "GPU_MAX_K",
    "KMEANS_NITER",
    "KMEANS_SEED",
    "first_partner_ranks",
    "kmeans_assignments",
    "knn_chunks",
    "knn_chunk_size",
    "rank_chunk_size",
]

logger = logging.getLogger(__name__)

CHUNK_BYTES = 64 << 20
"""Target working memory of one chunk (the default ``chunk_size`` is derived from it)."""

GPU_MAX_K = 2048
"""Largest k faiss's GPU brute-force search accepts."""

KMEANS_NITER = 20
KMEANS_SEED = 1234
"""k-means settings of PML's ``FaissKMeans`` (``niter=20``, faiss's default seed), so that the NMI
matches pytorch-metric-learning's ``AccuracyCalculator`` on the same vectors."""

# Bytes per (query, neighbour) entry of a kNN chunk: faiss's float32 scores and int64 ids, our
# int64 ids without self, int32 labels, bool masks, int32 cumsum and float64 precision.
_KNN_ENTRY_BYTES = 48
# Bytes per (query, item) entry of a rank chunk: one float32 score and one bool.
_RANK_ENTRY_BYTES = 5
_MAX_CHUNK = 4096  # faiss's own query block (distance_compute_blas_query_bs); more buys nothing
_DATABASE_BLOCK = 4096
"""Database rows per faiss BLAS block during our searches (faiss's default: 1024). A 4096 x 4096
block (64 MiB) means 4x fewer thread barriers per query block; on the shared 2-core machine of
docs/benchmarks.md it made the search 10-20% faster when other processes competed for the cores
and no slower otherwise (same results: only the blocking of the same products changes)."""


def _blas_min_rows(d: int) -> int:
    """Fewest queries per faiss call that take faiss's BLAS path (``nq * d >= threshold``).

    Below it faiss computes one dot product at a time, ten times slower here (measured).
    """
    return math.ceil(int(faiss.cvar.distance_compute_blas_threshold) / max(d, 1))


def knn_chunk_size(n: int, k: int, d: int) -> int:
    """Default queries per faiss call: about :data:`CHUNK_BYTES` of per-neighbour arrays."""
    rows = CHUNK_BYTES // (_KNN_ENTRY_BYTES * max(k, 1))
    return int(min(n, _MAX_CHUNK, max(rows, _blas_min_rows(d))))


def rank_chunk_size(n: int) -> int:
    """Default queries per block of the rank pass: about :data:`CHUNK_BYTES` of scores."""
    return int(min(n, _MAX_CHUNK, max(16, CHUNK_BYTES // (_RANK_ENTRY_BYTES * n))))


def knn_chunks(
    x: np.ndarray, k: int, *, inner_product: bool, gpu: int | None, chunk: int
) -> Iterator[tuple[int, np.ndarray]]:
    """Exact k nearest neighbours of every row of ``x`` among all rows (itself included).

    Yields ``(start, ids)`` per chunk of ``chunk`` queries, ``ids`` an int64 ``[rows, k]`` array
    sorted by decreasing similarity. CPU: ``faiss.knn``, the same exhaustive kernel as
    ``IndexFlatIP/IndexFlatL2.search`` but without the index's copy of the data. GPU: a
    ``GpuIndexFlatIP/L2`` holding the data on the GPU once.
    """
    n, d = x.shape
    metric = faiss.METRIC_INNER_PRODUCT if inner_product else faiss.METRIC_L2
    if gpu is None:
        with _database_block(_DATABASE_BLOCK):
            for start in range(0, n, chunk):
                _, ids = faiss.knn(x[start : start + chunk], x, k, metric)
                yield start, ids
        return
    resources = faiss.StandardGpuResources()
    config = faiss.GpuIndexFlatConfig()
    config.device = gpu
    index_type = faiss.GpuIndexFlatIP if inner_product else faiss.GpuIndexFlatL2
    index = index_type(resources, d, config)
    index.add(x)
    try:
        for start in range(0, n, chunk):
            _, ids = index.search(x[start : start + chunk], k)
            yield start, ids
    finally:
        index.reset()
        del index, resources


@contextmanager
def _database_block(rows: int) -> Iterator[None]:
    """Temporarily raise faiss's global BLAS database block size (restored on exit)."""
    old = int(faiss.cvar.distance_compute_blas_database_bs)
    faiss.cvar.distance_compute_blas_database_bs = max(old, rows)
    try:
        yield
    finally:
        faiss.cvar.distance_compute_blas_database_bs = old


def first_partner_ranks(
    x: np.ndarray,
    codes: np.ndarray,
    queries: np.ndarray,
    *,
    inner_product: bool,
    chunk: int,
) -> np.ndarray:
    """0-based rank of each query's most similar same-class item among all other items.

    For query q with best partner score s*, the rank is #{j != q : score(q, j) > s*}: the number
    of items ranked above the first correct one, exactly as a full sort would place it (ties
    resolved in the query's favour). Scores are inner products, or for L2 ``2 q.x - |x|^2``, which
    orders items as ``-|q - x|^2`` does. One BLAS product per chunk of queries; s* is read from the
    same block, so the comparison is exact. Every query must have a partner.
    """
    n = len(x)
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes)
    starts = np.cumsum(counts) - counts
    sq_norms = None if inner_product else np.einsum("ij,ij->i", x, x)
    ranks = np.empty(len(queries), dtype=np.int64)
    scores = np.empty((min(chunk, len(queries)), n), dtype=np.float32)
    above = np.empty(scores.shape, dtype=bool)
    for lo in range(0, len(queries), chunk):
        q = queries[lo : lo + chunk]
        rows = len(q)
        block, mask = scores[:rows], above[:rows]
        np.matmul(x[q], x.T, out=block)
        if sq_norms is not None:
            block *= 2
            block -= sq_norms
        block[np.arange(rows), q] = -np.inf
        # The query's class members, as (row, member) pairs grouped by row.
        sizes = counts[codes[q]]
        first = np.cumsum(sizes) - sizes
        offsets = np.arange(int(sizes.sum())) - np.repeat(first, sizes)
        members = order[np.repeat(starts[codes[q]], sizes) + offsets]
        partner_scores = block[np.repeat(np.arange(rows), sizes), members]  # self is -inf
        best = np.maximum.reduceat(partner_scores, first)
        np.greater(block, best[:, None], out=mask)
        ranks[lo : lo + rows] = np.add.reduce(mask.view(np.uint8), axis=1, dtype=np.int32)
    return ranks


def kmeans_assignments(x: np.ndarray, n_clusters: int, *, gpu: bool) -> np.ndarray:
    """faiss k-means (PML's settings, fixed seed: deterministic); each row's nearest centroid."""
    kmeans = faiss.Kmeans(
        x.shape[1],
        n_clusters,
        niter=KMEANS_NITER,
        seed=KMEANS_SEED,
        min_points_per_centroid=1,  # evaluation data: few points per class is expected, no warning
        gpu=gpu,
    )
    kmeans.train(x)
    _, assigned = kmeans.index.search(x, 1)
    return assigned.reshape(-1)
