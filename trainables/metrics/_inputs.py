"""Input checks and conversions for :mod:`trainables.metrics` (private helper).

Every rejected input raises :class:`~trainables.errors.UserError` whose message says what was
expected, what arrived and how to fix it (docs/design.md). Nothing here imports torch: a
tensor is recognised by its ``detach`` method and moved to NumPy on the CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np

from dmlsearch.trainables.errors import UserError

__all__ = [
    "SIMILARITIES",
    "as_float32_rows",
    "as_label_codes",
    "check_chunk_size",
    "check_ks",
    "check_similarity",
    "faiss_gpu",
]

logger = logging.getLogger(__name__)

SIMILARITIES = ("cosine", "euclidean")

# Rows converted (and checked for NaN/inf) at a time: bounds the temporaries to a few MiB.
_CONVERT_ROWS = 8192


def _to_numpy(value: Any) -> np.ndarray:
    """A NumPy view or copy of an array-like; torch tensors are detached and moved to the CPU."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch.Tensor (torch not imported)
        tensor = value.detach().cpu()
        if tensor.dtype.is_floating_point and tensor.dtype.itemsize < 4:
            tensor = tensor.float()  # bfloat16 has no NumPy twin; float16 is widened anyway
        return tensor.numpy()
    return np.asarray(value)


def as_float32_rows(embeddings: Any, *, normalise: bool) -> np.ndarray:
    """Embeddings as a C-contiguous float32 ``[N, d]`` array, checked finite.

    With ``normalise`` every row is divided by its L2 norm (a zero row stays zero), written into
    one new float32 array block by block, so no float64 or second full-size copy is made. Without
    it the input is returned as is when it already is contiguous float32 (no copy).
    """
    arr = _to_numpy(embeddings)
    if arr.ndim != 2:
        raise UserError(
            f"embeddings: expected a 2-D array [N, d], got shape {tuple(arr.shape)}; "
            "fix: pass one row per item (reshape or stack the batch outputs)"
        )
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise UserError(
            f"embeddings: expected a float array, got dtype {arr.dtype}; "
            "fix: pass the model's float outputs"
        )
    n, d = arr.shape
    if d < 1:
        raise UserError(
            f"embeddings: expected at least one dimension per row, got shape {(n, d)}; "
            "fix: check the embedding head's output size"
        )
    reuse = not normalise and arr.dtype == np.float32 and arr.flags.c_contiguous
    out = arr if reuse else np.empty((n, d), dtype=np.float32)
    for start in range(0, n, _CONVERT_ROWS):
        block = np.asarray(arr[start : start + _CONVERT_ROWS], dtype=np.float32)
        if not np.isfinite(block).all():
            bad = start + int(np.flatnonzero(~np.isfinite(block).all(axis=1))[0])
            raise UserError(
                f"embeddings: expected finite values, got NaN or inf (first in row {bad}); "
                "fix: look for a diverged model (NaN loss) or an overflowing float16 head"
            )
        if normalise:
            norms = np.sqrt(np.einsum("ij,ij->i", block, block))
            norms[norms == 0] = 1.0  # a zero vector stays zero: similarity 0 to everything
            np.divide(block, norms[:, None], out=out[start : start + len(block)])
        elif not reuse:
            out[start : start + len(block)] = block
    return out


def as_label_codes(labels: Any, n: int) -> np.ndarray:
    """Labels as int32 class codes ``0..C-1`` (order of :func:`numpy.unique`), checked length."""
    arr = _to_numpy(labels)
    if arr.ndim != 1:
        raise UserError(
            f"labels: expected a 1-D array [N], got shape {tuple(arr.shape)}; "
            "fix: pass one integer class label per item"
        )
    if len(arr) != n:
        raise UserError(
            f"labels: expected {n} labels (one per embedding row), got {len(arr)}; "
            "fix: pass the labels of exactly the embedded items, in the same order"
        )
    if n < 2:
        raise UserError(
            f"embeddings: expected at least 2 items, got {n}; "
            "fix: evaluate on a set where each item has others to retrieve"
        )
    _, codes = np.unique(arr, return_inverse=True)
    return codes.reshape(-1).astype(np.int32, copy=False)


def check_ks(ks: Iterable[Any]) -> tuple[int, ...]:
    """Recall cut-offs as a tuple of ints >= 1 (order kept, duplicates dropped)."""
    try:
        values = tuple(ks)
    except TypeError:
        values = (ks,)
    if not values:
        raise UserError(
            "ks: expected at least one recall cut-off, got an empty sequence; "
            "fix: e.g. ks=(1, 2, 4, 8)"
        )
    out: list[int] = []
    for k in values:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise UserError(
                f"ks: expected integers >= 1, got {k!r} in {values!r}; "
                "fix: e.g. ks=(1, 10, 100, 1000)"
            )
        if int(k) not in out:
            out.append(int(k))
    return tuple(out)


def check_similarity(similarity: str) -> str:
    """The similarity name, one of :data:`SIMILARITIES`."""
    if similarity not in SIMILARITIES:
        raise UserError(
            f"similarity: expected one of {', '.join(SIMILARITIES)}, got {similarity!r}; "
            "fix: use 'cosine' (default) or 'euclidean'"
        )
    return similarity


def check_chunk_size(chunk_size: Any) -> int | None:
    """``None`` (automatic) or a positive number of queries per chunk."""
    if chunk_size is None:
        return None
    is_int = isinstance(chunk_size, (int, np.integer)) and not isinstance(chunk_size, bool)
    if not is_int or chunk_size < 1:
        raise UserError(
            f"chunk_size: expected a positive integer or None, got {chunk_size!r}; "
            "fix: leave it None to size chunks automatically"
        )
    return int(chunk_size)


def faiss_gpu(device: Any, num_gpus: int) -> int | None:
    """The faiss GPU id to use, or ``None`` for the CPU.

    ``None`` takes GPU 0 when faiss sees a GPU; ``"cpu"`` forces the CPU; ``"cuda"``, ``"cuda:N"``,
    an int ``N`` or a ``torch.device`` ask for a GPU and fall back to the CPU, with a warning, when
    faiss sees none (a CPU-only faiss build or machine).
    """
    if device is None:
        return 0 if num_gpus > 0 else None
    if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
        name = f"cuda:{int(device)}"
    else:
        name = str(device).strip().lower()
    if name == "cpu":
        return None
    kind, _, index = name.partition(":")
    if kind not in ("cuda", "gpu") or (index and not index.isdigit()):
        raise UserError(
            f"device: expected None, 'cpu', 'cuda' or 'cuda:N', got {device!r}; "
            "fix: leave it None to use a GPU when faiss sees one"
        )
    gpu = int(index) if index else 0
    if num_gpus == 0:
        logger.warning("device=%r asked for a GPU but faiss sees none; searching on the CPU",
                       device)
        return None
    if gpu >= num_gpus:
        raise UserError(
            f"device: expected a GPU id below {num_gpus} (GPUs faiss sees), got {device!r}; "
            "fix: pick an existing GPU or set CUDA_VISIBLE_DEVICES"
        )
    return gpu
