"""Exact similarity search in query chunks, and k-means, for :mod:`trainables.metrics` (private).

Nothing here builds an ``N x N`` matrix. On the CPU one chunk of queries at a time gets its
``chunk x N`` block of scores from one BLAS product (about 64 MiB by default); faiss's C++ heaps
select the nearest neighbours from the block, and the same block answers "how many items score
above this query's best same-class item" for the queries that need it. On a GPU a faiss
``GpuIndexFlat`` searches the chunks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import faiss
import numpy as np

__all__ = [
    "CHUNK_BYTES",
    "GPU_MAX_K",
    "KMEANS_NITER",
    "KMEANS_SEED",
    "ClassMembers",
    "default_chunk_size",
    "gpu_knn_chunks",
    "kmeans_assignments",
    "ranks_of_best_partner",
    "score_blocks",
    "top_k",
]

logger = logging.getLogger(__name__)

CHUNK_BYTES = 64 << 20
"""Target size of one chunk's block of float32 scores (the default ``chunk_size``)."""

GPU_MAX_K = 2048
"""Largest k faiss's GPU brute-force search accepts."""

KMEANS_NITER = 20
KMEANS_SEED = 1234
"""k-means settings of PML's ``FaissKMeans`` (``niter=20``, faiss's default seed), so that the NMI
matches pytorch-metric-learning's ``AccuracyCalculator`` on the same vectors."""

_MAX_CHUNK = 4096


def default_chunk_size(n: int, *, gpu: bool, k: int = 1) -> int:
    """Queries per chunk: about :data:`CHUNK_BYTES` of scores (CPU) or of k-NN results (GPU)."""
    per_query = 16 * k if gpu else 4 * n  # GPU: float32 scores + int64 ids, 2x for our copies
    return int(min(n, _MAX_CHUNK, max(16, CHUNK_BYTES // per_query)))


def score_blocks(
    x: np.ndarray, *, inner_product: bool, chunk: int
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(start, block)``: ``block[i, j]`` scores item j for query ``start + i``.

    Higher is more similar: the inner product, or for L2 ``2 q.x - |x|^2``, which orders items
    exactly as ``-|q - x|^2`` does (``|q|^2`` is constant along a row). A query's own entry is
    ``-inf``, so it never counts as its own neighbour whatever ties occur. One buffer is reused:
    a block is valid until the next one is requested.
    """
    n = len(x)
    sq_norms = None if inner_product else np.einsum("ij,ij->i", x, x)
    buffer = np.empty((min(chunk, n), n), dtype=np.float32)
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        block = buffer[:rows]
        np.matmul(x[start : start + rows], x.T, out=block)
        if sq_norms is not None:
            block *= 2
            block -= sq_norms
        block[np.arange(rows), np.arange(start, start + rows)] = -np.inf
        yield start, block


def top_k(block: np.ndarray, k: int) -> np.ndarray:
    """Column ids ``[rows, k]`` of each row's k largest scores, best first (faiss's C++ heaps).

    Of equal scores the lower column id is kept, as in faiss's own searches.
    """
    rows, n = block.shape
    assert block.flags.c_contiguous and block.dtype == np.float32 and 1 <= k <= n
    values = np.empty((rows, k), dtype=np.float32)
    ids = np.empty((rows, k), dtype=np.int64)
    heaps = faiss.float_minheap_array_t()  # a min-heap per row keeps the k largest
    heaps.nh, heaps.k = rows, k
    heaps.val, heaps.ids = faiss.swig_ptr(values), faiss.swig_ptr(ids)
    heaps.heapify()
    heaps.addn(n, faiss.swig_ptr(block))  # ids are the column numbers
    heaps.reorder()
    return ids


class ClassMembers:
    """Items grouped by class code, to gather each query's same-class items without a loop."""

    def __init__(self, codes: np.ndarray) -> None:
        self.codes = codes
        self.order = np.argsort(codes, kind="stable")
        self.counts = np.bincount(codes)
        self.starts = np.cumsum(self.counts) - self.counts

    def pairs(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(row, member, first)``: one entry per (query, member of its class) pair, grouped by
        query; ``row`` indexes ``queries``, ``first[i]`` is where query i's group begins."""
        sizes = self.counts[self.codes[queries]]
        first = np.cumsum(sizes) - sizes
        offsets = np.arange(int(sizes.sum())) - np.repeat(first, sizes)
        members = self.order[np.repeat(self.starts[self.codes[queries]], sizes) + offsets]
        return np.repeat(np.arange(len(queries)), sizes), members, first


def ranks_of_best_partner(
    block: np.ndarray, rows: np.ndarray, start: int, members: ClassMembers
) -> np.ndarray:
    """0-based rank of the best same-class item of queries ``start + rows`` (rows of ``block``).

    The rank is #{j : score(q, j) > s*}, s* the query's best same-class score (self is ``-inf``):
    the number of items ranked above the first correct one, exactly where a full sort puts it
    (ties resolved in the query's favour). s* is read from the same block, so the comparison is
    exact. Every query must have a same-class item.
    """
    scores = block[rows]  # [len(rows), N] copy of just these rows
    row, member, first = members.pairs(rows + start)
    best = np.maximum.reduceat(scores[row, member], first)
    above = np.greater(scores, best[:, None], out=np.empty(scores.shape, dtype=bool))
    return np.add.reduce(above.view(np.uint8), axis=1, dtype=np.int64)


def gpu_knn_chunks(
    x: np.ndarray, k: int, *, inner_product: bool, gpu: int, chunk: int
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(start, ids)``: the k nearest rows (self included) of each query of the chunk, from
    a faiss ``GpuIndexFlatIP/L2`` that holds ``x`` on GPU ``gpu`` (exact search, k <= 2048)."""
    n, d = x.shape
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


def kmeans_assignments(x: np.ndarray, n_clusters: int, *, gpu: bool) -> np.ndarray:
    """faiss k-means (PML's settings, fixed seed: deterministic) and each row's nearest centroid."""
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
