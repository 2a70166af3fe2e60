"""How far a learned pseudo-distance is from a metric (Monteiro et al. 2020 §4.3, Fig. 3).

With D′ = 1 − D (D the ``e2e`` distance model's output, :func:`e2e_pseudo_distance`), or any
batched ``distance(a_rows, b_rows) -> [K]``, over an embedding set:

- **self**: D′(x, x) for every item (a metric gives 0);
- **asymmetry**: |D′(a, b) − D′(b, a)| over the pairs a < b (a symmetric D′ gives 0): all of
  them, or a fixed-seed uniform sample of ``pairs`` distinct ones when there are more (the
  sampling of :mod:`trainables.verification`);
- **triangle**: max(D′(b, c) − D′(a, b) − D′(a, c), 0), the paper's measure, over ``triplets``
  random triplets of three distinct items (a, b, c) drawn with ``default_rng(seed)``
  (a metric gives 0).

:func:`diagnostic_values` returns the three arrays, :func:`summarize_diagnostics` their mean,
max and fraction > 0, :func:`plot_distance_diagnostics` writes their histograms as PNGs.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.metrics.verification import PAIR_CHUNK
from dmlsearch.trainables.metrics.verification import PAIR_SEED
from dmlsearch.trainables.metrics.verification import PairScorer
from dmlsearch.trainables.metrics.verification import pair_indices
from dmlsearch.trainables.metrics.verification import sample_pairs

__all__ = [
    "DIAGNOSTIC_PAIRS",
    "DIAGNOSTIC_TRIPLETS",
    "PairDistance",
    "diagnostic_values",
    "distance_diagnostics",
    "e2e_pseudo_distance",
    "plot_distance_diagnostics",
    "summarize_diagnostics",
]

PairDistance = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
DIAGNOSTIC_PAIRS = 1_000_000
"""Pairs (a < b) for the asymmetry histogram when the set has more (the paper: all pairs)."""
DIAGNOSTIC_TRIPLETS = 100_000
"""Random triplets for the triangle-inequality histogram (the paper: "a random sample")."""

_TITLES = {
    "self": ("self_distance.png", "D'(x, x)"),
    "asymmetry": ("asymmetry.png", "|D'(a, b) - D'(b, a)|"),
    "triangle": ("triangle_violation.png", "max(D'(b, c) - D'(a, b) - D'(a, c), 0)"),
}


def e2e_pseudo_distance(scorer: PairScorer) -> PairDistance:
    """D′ = 1 − D of a pair scorer (the ``e2e`` loss's criterion; eval mode)."""
    return lambda a, b: 1.0 - scorer.pair_scores(a, b)


def _batched(distance: PairDistance, emb: torch.Tensor, a: np.ndarray, b: np.ndarray,
             chunk: int) -> np.ndarray:
    out = np.empty(len(a), dtype=np.float64)
    for start in range(0, len(a), chunk):
        ia = torch.from_numpy(a[start : start + chunk]).to(emb.device)
        ib = torch.from_numpy(b[start : start + chunk]).to(emb.device)
        out[start : start + len(ia)] = distance(emb[ia], emb[ib]).detach().double().cpu().numpy()
    return out


def _triplets(n: int, count: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """``count`` uniform triplets of three distinct items of ``range(n)``."""
    a = rng.integers(0, n, size=count)
    b = rng.integers(0, n - 1, size=count)
    b = b + (b >= a)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    c = rng.integers(0, n - 2, size=count)
    c = c + (c >= lo)
    c = c + (c >= hi)
    return a, b, c


@torch.no_grad()
def diagnostic_values(
    distance: PairDistance, embeddings: Any, *, pairs: int = DIAGNOSTIC_PAIRS,
    triplets: int = DIAGNOSTIC_TRIPLETS, seed: int = PAIR_SEED,
    device: torch.device | str = "cpu", chunk: int = PAIR_CHUNK,
) -> dict[str, np.ndarray]:
    """``{"self": [N], "asymmetry": [pairs], "triangle": [triplets]}`` (see module docstring)."""
    if not torch.is_tensor(embeddings):
        embeddings = torch.from_numpy(np.ascontiguousarray(embeddings, dtype=np.float32))
    emb = embeddings.detach().float().to(device)
    n = len(emb) if emb.ndim == 2 else 0
    if n < 3:
        raise UserError(f"distance diagnostics: expected [N, d] embeddings with N >= 3 (a "
                        f"triplet needs 3 items), got shape {tuple(emb.shape)}; "
                        "fix: pass more items")
    items = np.arange(n)
    sample = sample_pairs(n, pairs, seed=seed)
    k = np.arange(sample) if isinstance(sample, int) else sample
    i, j = pair_indices(k, n)
    a, b, c = _triplets(n, triplets, np.random.default_rng(seed))
    return {
        "self": _batched(distance, emb, items, items, chunk),
        "asymmetry": np.abs(_batched(distance, emb, i, j, chunk)
                            - _batched(distance, emb, j, i, chunk)),
        "triangle": np.maximum(_batched(distance, emb, b, c, chunk)
                               - _batched(distance, emb, a, b, chunk)
                               - _batched(distance, emb, a, c, chunk), 0.0),
    }


def summarize_diagnostics(values: Mapping[str, np.ndarray]) -> dict[str, float]:
    """``<name>_mean``, ``<name>_max`` and ``<name>_positive`` (fraction > 0) of each array."""
    out: dict[str, float] = {}
    for name, arr in values.items():
        out[f"{name}_mean"] = float(np.mean(arr))
        out[f"{name}_max"] = float(np.max(arr))
        out[f"{name}_positive"] = float(np.mean(arr > 0))
    return out


def distance_diagnostics(distance: PairDistance, embeddings: Any, **options: Any
                         ) -> dict[str, float]:
    """Summary numbers of :func:`diagnostic_values` (same keyword options)."""
    return summarize_diagnostics(diagnostic_values(distance, embeddings, **options))


def plot_distance_diagnostics(values: Mapping[str, np.ndarray], folder: Path | str, *,
                              bins: int = 50) -> list[Path]:
    """Histograms of :func:`diagnostic_values` as PNGs in ``folder`` (created); their paths."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state (Agg canvas)

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, arr in values.items():
        filename, label = _TITLES.get(name, (f"{name}.png", name))
        fig = Figure(figsize=(5, 3.5))
        ax = fig.add_subplot()
        ax.hist(arr, bins=bins)
        ax.set_xlabel(label)
        ax.set_ylabel("count")
        ax.set_title(f"{name}: n={len(arr)}, mean={np.mean(arr):.3g}, max={np.max(arr):.3g}")
        fig.tight_layout()
        path = folder / filename
        fig.savefig(path, dpi=100)
        paths.append(path)
    return paths
