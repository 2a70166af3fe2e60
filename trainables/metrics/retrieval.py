"""Retrieval metrics of an embedding set: Recall@k (Psomas 2020 §3.3), P@1, R-Precision and MAP@R
(Musgrave et al. 2020), NMI.

Verification metrics of scored pairs (EER, AUC) are in :mod:`dmlsearch.trainables.metrics.roc`.

Each item queries all the others (itself excluded, by index). With R = number of *other* items of
the query's class:

- **Recall@k** (DML convention, thesis §3.3): 1 if at least one of the k nearest neighbours has
  the query's class, averaged over queries. Recall@1 equals P@1.
- **P@1**: the nearest neighbour has the query's class.
- **R-Precision**: the fraction of the R nearest neighbours that share the class.
- **MAP@R** (Musgrave, Belongie & Lim, "A Metric Learning Reality Check", ECCV 2020):
  ``(1/R) * sum_{i<=R} P(i) * rel(i)``, P(i) the precision among the i nearest, rel(i) = 1 if the
  i-th is of the query's class.
- **NMI**: faiss k-means (k = number of classes, PML's settings, fixed seed) on the vectors the
  similarity uses (L2-normalised for cosine), scored with sklearn's
  ``normalized_mutual_info_score`` against the labels.

Queries whose class has a single item have no R and are left out of the kNN metrics (as PML's
``AccuracyCalculator`` does); they stay in the reference set, and in NMI.

Scale (SOP test set: 60,502 x 512): nothing of size N x N is built. On the CPU one exact faiss
search (``faiss.knn``, the kernel of ``IndexFlatIP/L2.search``) gives every query its ``depth``
nearest neighbours, depth = max(largest R, cut-offs <= 32), so R-Precision and MAP@R are exact; it
runs in chunks of queries, and each chunk's metrics are computed from its neighbour ids with
vectorised NumPy. A recall cut-off deeper than that (SOP's 100 and 1000) is answered exactly by a
second pass over only the queries whose first correct neighbour is not within ``depth``: their
rank is the number of other-class items scored above their best same-class item, counted on
BLAS blocks of ~64 MiB of scores (:func:`trainables._metrics_knn.first_partner_ranks`). The
cost is one search plus about (1 - Recall@depth) of one; a top-1000 faiss search would cost
twice a top-12 one (selecting 1000 costs faiss as much as its matrix product; see
``docs/benchmarks.md``).
On a GPU one search goes as deep as the largest cut-off, so no rank pass is needed: a faiss
``GpuIndexFlat`` when the installed faiss sees the GPU (faiss allows k <= 2048; deeper requests
run on the CPU), else torch (a chunk's scores by one fp32 matrix product, ``torch.topk``; k <=
4096). A trial evaluating on ``cuda`` passes its device and gets one of them.

:func:`query_retrievals` answers, per query, what these metrics are made of: its nearest
neighbours (itself excluded) and its R-Precision and AP@R, from the same search and the same
per-chunk code (the retrieval galleries draw them).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import faiss
import numpy as np

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.metrics import _inputs as inputs
from dmlsearch.trainables.metrics import _knn as knn

__all__ = ["QueryRetrievals", "query_retrievals", "retrieval_metrics"]

logger = logging.getLogger(__name__)

_CHEAP_DEPTH = 32
"""CPU: recall cut-offs up to this depth are read from the faiss search itself (its heap of 33
costs a few % more than one of 12, measured); deeper ones come from the rank pass."""


def retrieval_metrics(
    embeddings: Any,
    labels: Any,
    *,
    ks: Sequence[int] = (1, 2, 4, 8),
    nmi: bool = False,
    similarity: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    backend: str | None = None,
) -> dict[str, float]:
    """Recall@k, P@1, R-Precision and MAP@R (and optionally NMI) of an embedding set.

    Args:
        embeddings: ``[N, d]`` float array or ``torch.Tensor`` (converted to contiguous float32).
        labels: ``[N]`` class labels (any values :func:`numpy.unique` can sort, usually ints).
        ks: Recall cut-offs; ``recall@k`` is reported for each.
        nmi: Also run k-means and report ``nmi``.
        similarity: ``"cosine"`` (inner product of L2-normalised rows) or ``"euclidean"`` (L2).
        chunk_size: Queries per chunk; ``None`` sizes chunks to about 64 MiB of working memory.
        device: ``None`` (a GPU when faiss sees one), ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (or a
            ``torch.device``): a GPU is searched by faiss when it sees it, else by torch.
        backend: ``None`` (as ``device`` says), ``"faiss"`` or ``"torch"`` (the torch searcher
            on ``device``, the CPU when that is ``None``).

    Returns:
        ``{"recall@k" for k in ks, "precision@1", "r_precision", "map@r"[, "nmi"],
        "num_queries"}``; ``num_queries`` (an int) counts the queries that have a same-class
        partner, over which the kNN metrics are averaged.

    Raises:
        UserError: non-2-D or non-finite embeddings, mismatched lengths, fewer than 2 items, a
            cut-off below 1, an unknown similarity or device, or no query with a same-class item.
    """
    ks = inputs.check_ks(ks)
    similarity, chunk_size, (gpu, on), x, codes, partners = _checked(
        embeddings, labels, similarity=similarity, chunk_size=chunk_size, device=device,
        backend=backend)
    n, deepest = len(x), max(ks)
    r_max = int(partners.max())
    full_depth = min(max(r_max, deepest), n - 1)
    if gpu is not None and full_depth + 1 > knn.GPU_MAX_K:
        logger.info("k = %d is beyond faiss's GPU limit (%d): searching on the CPU",
                    full_depth + 1, knn.GPU_MAX_K)
        gpu = None
    if on is not None and full_depth + 1 > _TORCH_MAX_K:
        logger.info("k = %d is beyond the torch searcher's limit (%d): faiss on the CPU",
                    full_depth + 1, _TORCH_MAX_K)
        on = None
    if gpu is not None or on is not None:
        depth = full_depth  # one search serves every cut-off; no rank pass
    else:
        depth = min(max([r_max] + [k for k in ks if k <= _CHEAP_DEPTH]), n - 1)
    result = _knn_metrics(
        x, codes, partners, ks, depth=depth, inner_product=similarity == "cosine",
        gpu=gpu, chunk_size=chunk_size, torch_device=on,
    )
    if nmi:  # scikit-learn only here: a trial's validation, which needs no NMI, never imports it
        from sklearn.metrics import normalized_mutual_info_score

        assigned = knn.kmeans_assignments(x, int(codes.max()) + 1, gpu=gpu is not None)
        result["nmi"] = float(normalized_mutual_info_score(codes, assigned))
    return result


@dataclasses.dataclass(frozen=True)
class QueryRetrievals:
    """Every item as a query: its nearest neighbours and its kNN metrics, as
    :func:`retrieval_metrics` computes them (its means are over the items with ``partners > 0``).

    Attributes:
        neighbours: int64 ``[N, k]`` item ids, most similar first, the query itself excluded.
        same: bool ``[N, k]``: the neighbour has the query's class.
        r_precision: float64 ``[N]``: each query's R-Precision (0 where R = 0).
        ap_at_r: float64 ``[N]``: each query's AP@R, the terms of MAP@R (0 where R = 0).
        partners: int64 ``[N]``: R, the other items of the query's class (0: not a kNN query).
    """

    neighbours: np.ndarray
    same: np.ndarray
    r_precision: np.ndarray
    ap_at_r: np.ndarray
    partners: np.ndarray


def query_retrievals(
    embeddings: Any,
    labels: Any,
    *,
    k: int = 8,
    similarity: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    backend: str | None = None,
) -> QueryRetrievals:
    """Each item's ``k`` nearest neighbours and its R-Precision and AP@R (MLRC), per query.

    The same exact faiss search as :func:`retrieval_metrics` (``max(R, k)`` deep, chunked, the
    query removed by index), so the neighbours are the ones the metrics count and
    ``ap_at_r[partners > 0].mean()`` is its ``map@r``. ``k`` is capped at N - 1. Memory: O(N k).

    Raises:
        UserError: as :func:`retrieval_metrics` does, and for ``k`` below 1.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise UserError(f"k: expected an integer >= 1 (neighbours per query), got {k!r}; "
                        "fix: e.g. k=8")
    k = int(k)
    similarity, chunk_size, (gpu, on), x, codes, partners = _checked(
        embeddings, labels, similarity=similarity, chunk_size=chunk_size, device=device,
        backend=backend)
    n, d = x.shape
    r_max = int(partners.max())
    width = min(k, n - 1)
    depth = min(max(r_max, k), n - 1)
    if gpu is not None and depth + 1 > knn.GPU_MAX_K:
        gpu = None
    if on is not None and depth + 1 > _TORCH_MAX_K:
        on = None
    chunk = chunk_size or (knn.torch_chunk_size(n) if on is not None
                           else knn.knn_chunk_size(n, depth + 1, d))
    neighbours = np.empty((n, width), dtype=np.int64)
    same = np.empty((n, width), dtype=bool)
    r_precision = np.zeros(n)
    ap_at_r = np.zeros(n)
    for start, ids in knn.knn_chunks(x, depth + 1, inner_product=similarity == "cosine",
                                        gpu=gpu, chunk=chunk, torch_device=on):
        stop = start + len(ids)
        others = _without_self(ids, start)
        hits = codes[others] == codes[start:stop, None]
        rp, ap = _r_precision_and_ap_at_r(hits[:, :r_max], partners[start:stop])
        r_precision[start:stop], ap_at_r[start:stop] = rp, ap
        neighbours[start:stop], same[start:stop] = others[:, :width], hits[:, :width]
    return QueryRetrievals(neighbours=neighbours, same=same, r_precision=r_precision,
                           ap_at_r=ap_at_r, partners=partners)


def _checked(embeddings: Any, labels: Any, *, similarity: str, chunk_size: Any, device: Any,
             backend: str | None = None
             ) -> tuple[str, Any, tuple[int | None, Any], np.ndarray, np.ndarray, np.ndarray]:
    """The inputs every kNN evaluation checks and prepares: the similarity, the chunk size, the
    searcher (a faiss GPU or None, a torch device or None), the float32 rows (L2-normalised for
    cosine), label codes and each item's R (its class's other items)."""
    similarity = inputs.check_similarity(similarity)
    chunk_size = inputs.check_chunk_size(chunk_size)
    searcher = _searcher(device, backend)
    x = inputs.as_float32_rows(embeddings, normalise=similarity == "cosine")
    codes = inputs.as_label_codes(labels, len(x))
    return similarity, chunk_size, searcher, x, codes, _partners(codes)


_BACKENDS = ("faiss", "torch")
_TORCH_MAX_K = 4096
"""Deepest search of the torch searcher (deeper: faiss on the CPU with the rank pass)."""


def _searcher(device: Any, backend: str | None) -> tuple[int | None, Any]:
    """``(faiss GPU id or None, torch device or None)``: who searches (see ``device`` and
    ``backend`` of :func:`retrieval_metrics`)."""
    if backend is not None and backend not in _BACKENDS:
        raise UserError(f"backend: expected None, 'faiss' or 'torch', got {backend!r}; fix: "
                        "leave it None to follow the device")
    if backend == "torch":
        import torch

        return None, torch.device(_torch_name(device))
    name = None if device is None else _torch_name(device)
    faiss_gpus = faiss.get_num_gpus()
    if backend == "faiss" or faiss_gpus > 0 or name is None or name == "cpu":
        return inputs.faiss_gpu(device, faiss_gpus), None
    import torch

    if name.startswith("cuda") and torch.cuda.is_available():
        return None, torch.device(name)
    return inputs.faiss_gpu(device, faiss_gpus), None  # warns and searches on the CPU


def _torch_name(device: Any) -> str:
    if device is None:
        return "cpu"
    if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
        return f"cuda:{int(device)}"
    return str(device).strip().lower()


def _partners(codes: np.ndarray) -> np.ndarray:
    """R of every item (the other items of its class); a user error when no class repeats."""
    partners = np.bincount(codes)[codes] - 1
    if not (partners > 0).any():
        raise UserError(
            f"labels: expected at least one class with 2 or more items, got {len(codes)} items "
            "in as many classes; fix: evaluate on a set where classes repeat (kNN metrics need "
            "a same-class item to retrieve)"
        )
    return partners


def _knn_metrics(
    x: np.ndarray,
    codes: np.ndarray,
    partners: np.ndarray,
    ks: tuple[int, ...],
    *,
    depth: int,
    inner_product: bool,
    gpu: int | None,
    chunk_size: int | None,
    torch_device: Any = None,
) -> dict[str, float]:
    """The kNN metrics from one chunked faiss search ``depth`` deep (+ a rank pass if needed).

    Per query it keeps the 0-based rank of the first same-class neighbour and its R-Precision and
    AP@R: O(N) memory. Means are taken over the whole per-query arrays at the end, so the result
    does not depend on how the queries were chunked.
    """
    n, d = x.shape
    chunk = chunk_size or (knn.torch_chunk_size(n) if torch_device is not None
                           else knn.knn_chunk_size(n, depth + 1, d))
    first_hit = np.full(n, n, dtype=np.int64)  # n = "not among the `depth` nearest"
    r_precision = np.zeros(n)
    ap_at_r = np.zeros(n)
    r_max = int(partners.max())
    logger.debug("kNN search: N=%d, d=%d, depth=%d, %d queries per chunk, gpu=%s",
                 n, d, depth, chunk, gpu)
    for start, ids in knn.knn_chunks(x, depth + 1, inner_product=inner_product, gpu=gpu,
                                        chunk=chunk, torch_device=torch_device):
        stop = start + len(ids)
        same = _same_class_without_self(ids, codes, start)
        hit_any = same.any(axis=1)
        first_hit[start:stop] = np.where(hit_any, same.argmax(axis=1), n)
        rp, ap = _r_precision_and_ap_at_r(same[:, :r_max], partners[start:stop])
        r_precision[start:stop] = rp
        ap_at_r[start:stop] = ap

    queries = np.flatnonzero(partners > 0)
    if max(ks) > depth:
        deeper = queries[first_hit[queries] == n]
        if len(deeper):
            logger.debug("rank pass for %d queries whose first hit is beyond depth %d",
                         len(deeper), depth)
            first_hit[deeper] = knn.first_partner_ranks(
                x, codes, deeper, inner_product=inner_product,
                chunk=chunk_size or knn.rank_chunk_size(n),
            )
    hits = first_hit[queries]
    num = len(queries)
    out: dict[str, float] = {f"recall@{k}": int(np.count_nonzero(hits < k)) / num for k in ks}
    out["precision@1"] = int(np.count_nonzero(hits == 0)) / num
    out["r_precision"] = float(r_precision[queries].mean())
    out["map@r"] = float(ap_at_r[queries].mean())
    out["num_queries"] = num
    return out


def _same_class_without_self(ids: np.ndarray, codes: np.ndarray, start: int) -> np.ndarray:
    """``[rows, k-1]`` bool: is each neighbour of the query's class, the query itself removed.

    Self is removed by index, wherever it sits (duplicates may tie with it); a row where it fell
    off the end (ties) loses its last neighbour instead.
    """
    neighbours = _without_self(ids, start)
    return codes[neighbours] == codes[start : start + len(ids), None]


def _without_self(ids: np.ndarray, start: int) -> np.ndarray:
    """``[rows, k-1]`` neighbour ids of queries ``start, start+1, ...``, each query removed."""
    rows, k = ids.shape
    is_self = ids == np.arange(start, start + rows)[:, None]
    is_self[~is_self.any(axis=1), -1] = True
    return ids[~is_self].reshape(rows, k - 1)


def _r_precision_and_ap_at_r(same: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-query R-Precision and AP@R (MLRC) from the first ``max R`` columns of ``same``.

    ``rel(i)`` is ``same[:, i]`` for ``i < R`` (later columns are masked out);
    ``P(i) = cumsum(rel)[i] / (i + 1)``; AP@R = sum(P * rel) / R. Queries with R = 0 get 0.
    """
    rel = same & (np.arange(same.shape[1]) < r[:, None])
    hits = np.cumsum(rel, axis=1, dtype=np.int32)
    precision = hits / np.arange(1, same.shape[1] + 1)
    denom = np.maximum(r, 1)
    return hits[:, -1] / denom, (precision * rel).sum(axis=1) / denom
