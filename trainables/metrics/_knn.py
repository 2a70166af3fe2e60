"""Exact kNN in query chunks (faiss, or torch on a GPU), first-partner ranks, k-means (private).

Used by :func:`trainables.metrics.retrieval_metrics`. Nothing here builds an ``N x N`` matrix:
the kNN search runs in chunks of queries, and the rank pass holds one block of scores (queries x
a range of items, about 64 MiB by default) at a time.

Three searchers give the same neighbours (up to the order of exact ties):

* faiss on the CPU (``faiss.knn``);
* faiss on a GPU (``GpuIndexFlat``), when the installed faiss sees one; its GPU resources are
  made once per process and GPU (:func:`gpu_resources`), not per evaluation;
* torch on any device (``torch_device``): a chunk's scores by one matrix product, its top k by
  ``torch.topk``. It is the GPU path where faiss cannot use the GPU (no faiss wheel is built
  for CUDA 13, which torch's wheels use), and runs on a CPU too (tests compare it with faiss).
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
    "gpu_resources",
    "knn_chunks",
    "knn_chunk_size",
    "torch_chunk_size",
    "rank_block_shape",
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
# Bytes per (query, item) entry of a rank block: one float32 score and one bool.
_RANK_ENTRY_BYTES = 5
_RANK_ROWS = 1024
_RANK_MIN_COLS = 1024
_MAX_CHUNK = 4096  # faiss's own query block (distance_compute_blas_query_bs); more buys nothing
_TORCH_CHUNK_BYTES = 256 << 20
"""torch searcher: bytes of one chunk's score matrix (queries x all items, float32)."""
_GPU_TEMP_BYTES = 256 << 20
"""Temporary memory of the faiss GPU resources (faiss's default, 1.5 GiB, is taken from the
GPU that the trial trains on, once per evaluation)."""
_GPU_RESOURCES: dict[int, object] = {}
_DATABASE_BLOCK = 4096
"""Database rows per faiss BLAS block during our searches (faiss's default: 1024). A 4096 x 4096
block (64 MiB) means 4x fewer thread barriers per query block; on the shared 2-core machine of
docs/benchmarks.md it made the search about 17% faster when other processes competed for the
cores and made no clear difference otherwise (same products, only blocked differently)."""


def _blas_min_rows(d: int) -> int:
    """Fewest queries per faiss call that take faiss's BLAS path (``nq * d >= threshold``).

    Below it faiss computes one dot product at a time, ten times slower here (measured).
    """
    return math.ceil(int(faiss.cvar.distance_compute_blas_threshold) / max(d, 1))


def knn_chunk_size(n: int, k: int, d: int) -> int:
    """Default queries per faiss call: about :data:`CHUNK_BYTES` of per-neighbour arrays."""
    rows = CHUNK_BYTES // (_KNN_ENTRY_BYTES * max(k, 1))
    return int(min(n, _MAX_CHUNK, max(rows, _blas_min_rows(d))))


def torch_chunk_size(n: int) -> int:
    """Default queries per chunk of the torch searcher: about 256 MiB of scores."""
    return int(max(1, min(n, _TORCH_CHUNK_BYTES // (4 * max(n, 1)))))


def gpu_resources(gpu: int) -> object:
    """faiss's GPU resources for GPU ``gpu``, made once per process."""
    resources = _GPU_RESOURCES.get(gpu)
    if resources is None:
        resources = faiss.StandardGpuResources()
        resources.setTempMemory(_GPU_TEMP_BYTES)
        _GPU_RESOURCES[gpu] = resources
    return resources


def rank_chunk_size(n: int) -> int:
    """Default queries per block of the rank pass (BLAS runs ~15% slower with 221 than 1024)."""
    return int(min(n, _RANK_ROWS))


def rank_block_shape(n: int, rows: int) -> tuple[int, int]:
    """``(rows, columns)`` of one rank-pass block: about :data:`CHUNK_BYTES` of scores + mask."""
    cols = max(_RANK_MIN_COLS, CHUNK_BYTES // (_RANK_ENTRY_BYTES * max(rows, 1)))
    return rows, int(min(n, cols))


def knn_chunks(
    x: np.ndarray, k: int, *, inner_product: bool, gpu: int | None, chunk: int,
    torch_device: object | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Exact k nearest neighbours of every row of ``x`` among all rows (itself included).

    Yields ``(start, ids)`` per chunk of ``chunk`` queries, ``ids`` an int64 ``[rows, k]`` array
    sorted by decreasing similarity. CPU: ``faiss.knn``, the same exhaustive kernel as
    ``IndexFlatIP/IndexFlatL2.search`` but without the index's copy of the data. GPU: a
    ``GpuIndexFlatIP/L2`` holding the data on the GPU once. ``torch_device``: the torch
    searcher on that device instead (see the module's notes).
    """
    if torch_device is not None:
        yield from _torch_knn_chunks(x, k, inner_product=inner_product, device=torch_device,
                                     chunk=chunk)
        return
    n, d = x.shape
    metric = faiss.METRIC_INNER_PRODUCT if inner_product else faiss.METRIC_L2
    if gpu is None:
        with _database_block(_DATABASE_BLOCK):
            for start in range(0, n, chunk):
                _, ids = faiss.knn(x[start : start + chunk], x, k, metric)
                yield start, ids
        return
    config = faiss.GpuIndexFlatConfig()
    config.device = gpu
    index_type = faiss.GpuIndexFlatIP if inner_product else faiss.GpuIndexFlatL2
    index = index_type(gpu_resources(gpu), d, config)
    index.add(x)
    try:
        for start in range(0, n, chunk):
            _, ids = index.search(x[start : start + chunk], k)
            yield start, ids
    finally:
        index.reset()
        del index


def _torch_knn_chunks(
    x: np.ndarray, k: int, *, inner_product: bool, device: object, chunk: int
) -> Iterator[tuple[int, np.ndarray]]:
    """The torch searcher: scores ``q . x`` (for L2 ``2 q . x - |x|^2``, which orders items as
    ``-|q - x|^2`` does) of a chunk of queries against every row, in fp32, then ``topk``."""
    import torch

    rows = torch.from_numpy(x).to(device)
    sq_norms = None if inner_product else (rows * rows).sum(dim=1)
    with torch.no_grad():
        for start in range(0, len(x), chunk):
            scores = rows[start : start + chunk] @ rows.T
            if sq_norms is not None:
                scores.mul_(2).sub_(sq_norms)
            ids = torch.topk(scores, k, dim=1, largest=True, sorted=True).indices
            yield start, ids.cpu().numpy()


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

    The rank is the number of other-class items that score above the query's best same-class
    score s*: the number of items a full sort places above the first correct one (ties resolved
    in the query's favour). Scores are inner products, or for L2 ``2 q.x - |x|^2``, which orders
    items as ``-|q - x|^2`` does. s* comes from the query's own class (a few dot products); the
    count runs over ``chunk`` queries x a column block of items at a time, one BLAS product each
    (about :data:`CHUNK_BYTES` of scores), with the query's own class masked out. Every query
    must have a same-class item.
    """
    n = len(x)
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes)
    starts = np.cumsum(counts) - counts
    sq_norms = None if inner_product else np.einsum("ij,ij->i", x, x)
    ranks = np.empty(len(queries), dtype=np.int64)
    rows_max, cols = rank_block_shape(n, min(chunk, len(queries)))
    score_buffer = np.empty(rows_max * cols, dtype=np.float32)
    above_buffer = np.empty(rows_max * cols, dtype=bool)
    for lo in range(0, len(queries), chunk):
        q = queries[lo : lo + chunk]
        rows, xq = len(q), x[q]
        # (row, member) pairs: every item of the query's class, self included, grouped by row.
        sizes = counts[codes[q]]
        first = np.cumsum(sizes) - sizes
        offsets = np.arange(int(sizes.sum())) - np.repeat(first, sizes)
        row = np.repeat(np.arange(rows), sizes)
        member = order[np.repeat(starts[codes[q]], sizes) + offsets]
        partner = member != q[row]
        partner_scores = _row_dots(xq, row[partner], x, member[partner])
        if sq_norms is not None:
            partner_scores = 2 * partner_scores - sq_norms[member[partner]]
        best = np.maximum.reduceat(partner_scores, np.cumsum(sizes - 1) - (sizes - 1))
        above_best = np.zeros(rows, dtype=np.int64)
        for c0 in range(0, n, cols):
            c1 = min(n, c0 + cols)
            block = score_buffer[: rows * (c1 - c0)].reshape(rows, c1 - c0)
            np.matmul(xq, x[c0:c1].T, out=block)
            if sq_norms is not None:
                block *= 2
                block -= sq_norms[c0:c1]
            inside = (member >= c0) & (member < c1)
            block[row[inside], member[inside] - c0] = -np.inf  # own class, self included
            mask = above_buffer[: block.size].reshape(block.shape)
            np.greater(block, best[:, None], out=mask)
            above_best += np.add.reduce(mask.view(np.uint8), axis=1, dtype=np.int64)
        ranks[lo : lo + rows] = above_best
    return ranks


def _row_dots(a: np.ndarray, ia: np.ndarray, b: np.ndarray, ib: np.ndarray) -> np.ndarray:
    """``a[ia[i]] . b[ib[i]]`` for every i, gathering a few thousand rows at a time."""
    out = np.empty(len(ia), dtype=np.float32)
    step = 2048
    for lo in range(0, len(ia), step):
        out[lo : lo + step] = np.einsum(
            "ij,ij->i", a[ia[lo : lo + step]], b[ib[lo : lo + step]])
    return out


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
