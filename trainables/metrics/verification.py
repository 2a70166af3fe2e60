"""Verification trials of an embedding set: which pairs, their scores, their EER and AUC.

Monteiro et al., ICML 2020, §4 and Table 1: every pair i < j of the evaluation set
is a trial, labelled same class or not, and scored three ways:

- ``cosine``: cosine similarity of the two embeddings;
- ``e2e``: the learned distance model's output D(x_i, x_j) ∈ (0, 1) (needs a *scorer*, i.e. the
  ``e2e`` loss's criterion; D is asymmetric and the pair is fed in the order (i, j));
- ``fusion``: the reference code's ``0.5 · (D + 0.5 · (cos + 1))``: the average of D and the
  cosine mapped to [0, 1] (the paper's "simple sum fusion", rescaled; EER and AUC only depend on
  the order of the scores).

A dataset with a trial list (speaker verification: VoxCeleb's ``veri_test2.txt``) gives the
pairs instead: ``pairs=(left, right, same)``, positions into the embeddings, scored as listed
(the enrolment utterance first).

Scale: when there are more than ``max_pairs`` pairs (N(N−1)/2 > max_pairs > 0), a uniform random
sample of ``max_pairs`` *distinct* pairs is drawn with ``numpy.random.default_rng(PAIR_SEED)``,
the same sample for every epoch and every trial on the same set; ``max_pairs = 0`` takes all of
them. Pairs are handled as linear indices k of the row-major upper triangle and turned into
(i, j) in chunks of ``PAIR_CHUNK``, so no N×N array is ever built; what is kept is one float32
score per pair and scoring (plus a bool label), i.e. ~13 bytes per trial with all three scorings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.metrics.names import SCORINGS
from dmlsearch.trainables.metrics.roc import verification_metrics

__all__ = [
    "PAIR_CHUNK",
    "PAIR_SEED",
    "PairScorer",
    "pair_indices",
    "pair_verification_metrics",
    "sample_pairs",
    "score_index_pairs",
    "score_pairs",
]

PAIR_SEED = 0
"""Seed of the pair sample (fixed: every epoch and trial sees the same trials)."""
PAIR_CHUNK = 1 << 16
"""Pairs scored per step (D's activations: PAIR_CHUNK × hidden size floats)."""


class PairScorer(Protocol):
    """What scores a pair with a learned model (the ``e2e`` loss's criterion is one)."""

    def pair_scores(self, emb_a: torch.Tensor, emb_b: torch.Tensor) -> torch.Tensor: ...


def pair_indices(k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(i, j), i < j, of linear indices ``k`` into the row-major upper triangle of n items."""
    k = np.asarray(k, dtype=np.int64)
    # Row i starts at S(i) = i(2n − i − 1)/2; solve S(i) <= k for the largest i, then fix the
    # float rounding by one step either way.
    b = 2 * n - 1
    i = np.floor((b - np.sqrt(np.maximum(b * b - 8.0 * k, 0.0))) / 2).astype(np.int64)
    i = np.clip(i, 0, n - 2)

    def start(r: np.ndarray) -> np.ndarray:
        return r * (2 * n - r - 1) // 2

    i = np.where(start(i + 1) <= k, i + 1, i)
    i = np.where(start(i) > k, i - 1, i)
    return i, k - start(i) + i + 1


def sample_pairs(n: int, max_pairs: int, *, seed: int = PAIR_SEED) -> np.ndarray | int:
    """Sorted linear pair indices to score, or the count M when all M pairs are taken."""
    total = n * (n - 1) // 2
    if max_pairs < 0:
        raise UserError(f"verify_pairs must be >= 0 (0: all pairs), got {max_pairs}; "
                        "set e.g. verify_pairs=1000000")
    if max_pairs == 0 or total <= max_pairs:
        return total
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(total, size=max_pairs, replace=False))


def _chunks(pairs: np.ndarray | int, chunk: int) -> Iterator[np.ndarray]:
    count = pairs if isinstance(pairs, int) else len(pairs)
    for start in range(0, count, chunk):
        stop = min(start + chunk, count)
        yield np.arange(start, stop) if isinstance(pairs, int) else pairs[start:stop]


def _scorings(scorer: PairScorer | None) -> tuple[str, ...]:
    return SCORINGS if scorer is not None else ("cosine",)


@torch.no_grad()
def _score_chunk(emb: torch.Tensor, normed: torch.Tensor, i: np.ndarray, j: np.ndarray,
                 scorer: PairScorer | None, device: torch.device | str
                 ) -> dict[str, np.ndarray]:
    ti, tj = torch.from_numpy(i).to(device), torch.from_numpy(j).to(device)
    cos = (normed[ti] * normed[tj]).sum(dim=1)
    out = {"cosine": cos.cpu().numpy()}
    if scorer is not None:
        d = scorer.pair_scores(emb[ti], emb[tj]).float()
        out["e2e"] = d.cpu().numpy()
        out["fusion"] = (0.5 * (d + 0.5 * (cos + 1.0))).cpu().numpy()
    return out


def _as_embeddings(embeddings: Any, device: torch.device | str) -> torch.Tensor:
    if not torch.is_tensor(embeddings):
        embeddings = torch.from_numpy(np.ascontiguousarray(embeddings, dtype=np.float32))
    return embeddings.detach().float().to(device)


@torch.no_grad()
def score_index_pairs(
    embeddings: Any, left: Any, right: Any, *, scorer: PairScorer | None = None,
    device: torch.device | str = "cpu", chunk: int = PAIR_CHUNK,
) -> dict[str, np.ndarray]:
    """Scores of the listed pairs (``left[k]``, ``right[k]``), positions into ``embeddings``
    ``[N, d]``: ``{scoring: float32 [M]}`` as :func:`score_pairs` gives them."""
    emb = _as_embeddings(embeddings, device)
    left = np.asarray(left, dtype=np.int64).reshape(-1)
    right = np.asarray(right, dtype=np.int64).reshape(-1)
    n = len(emb) if emb.ndim == 2 else 0
    if len(left) != len(right) or not len(left) or (
            min(left.min(), right.min()) < 0 or max(left.max(), right.max()) >= n):
        raise UserError(
            f"verification: expected equally many listed pairs of positions in 0..{n - 1}, got "
            f"{len(left)} and {len(right)}; fix the trial list")
    normed = F.normalize(emb, dim=1)
    scores = {name: np.empty(len(left), dtype=np.float32) for name in _scorings(scorer)}
    for start in range(0, len(left), chunk):
        stop = min(start + chunk, len(left))
        part = _score_chunk(emb, normed, left[start:stop], right[start:stop], scorer, device)
        for name, values in part.items():
            scores[name][start:stop] = values
    return scores


@torch.no_grad()
def score_pairs(
    embeddings: Any, labels: Any, *, scorer: PairScorer | None = None, max_pairs: int = 0,
    seed: int = PAIR_SEED, device: torch.device | str = "cpu", chunk: int = PAIR_CHUNK,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Scores of the trials (all pairs i < j, or a sample) and their same-class flags.

    Returns ``({scoring: float32 [M]}, bool [M])``; scorings are ``cosine``, plus ``e2e`` and
    ``fusion`` when a ``scorer`` is given. ``embeddings`` is ``[N, d]`` (NumPy or torch).
    """
    emb = _as_embeddings(embeddings, device)
    codes = np.unique(np.asarray(labels), return_inverse=True)[1].reshape(-1)
    n = len(emb) if emb.ndim == 2 else 0
    if n < 2 or len(codes) != n:
        raise UserError(
            f"verification: expected [N, d] embeddings with N >= 2 and N labels, got shape "
            f"{tuple(emb.shape)} and {len(codes)} labels; fix: evaluate a set of 2+ items"
        )
    normed = F.normalize(emb, dim=1)
    pairs = sample_pairs(n, max_pairs, seed=seed)
    count = pairs if isinstance(pairs, int) else len(pairs)
    scores = {name: np.empty(count, dtype=np.float32) for name in _scorings(scorer)}
    same = np.empty(count, dtype=bool)
    at = 0
    for k in _chunks(pairs, chunk):
        i, j = pair_indices(k, n)
        stop = at + len(k)
        for name, values in _score_chunk(emb, normed, i, j, scorer, device).items():
            scores[name][at:stop] = values
        same[at:stop] = codes[i] == codes[j]
        at = stop
    return scores, same


#: metric name prefix → the key of :func:`~trainables.metrics.roc.verification_metrics`
_REPORTED = {"eer": "eer", "auc": "auc", "mindcf01": "mindcf_0.01", "mindcf05": "mindcf_0.05"}


def pair_verification_metrics(
    embeddings: Any, labels: Any, *, scorer: PairScorer | None = None, max_pairs: int = 0,
    seed: int = PAIR_SEED, device: torch.device | str = "cpu",
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> dict[str, float]:
    """``eer_<scoring>``, ``auc_<scoring>``, ``mindcf01_<scoring>`` and ``mindcf05_<scoring>``
    for each scoring, the same without suffix for the default one (``e2e`` with a scorer, else
    ``cosine``) and ``verify_trials`` (pairs scored). ``pairs``: a trial list's (left, right,
    same) instead of the pairs of ``labels``."""
    if pairs is None:
        scores, same = score_pairs(embeddings, labels, scorer=scorer, max_pairs=max_pairs,
                                   seed=seed, device=device)
    else:
        left, right, same = pairs
        scores = score_index_pairs(embeddings, left, right, scorer=scorer, device=device)
    out: dict[str, float] = {}
    for name, values in scores.items():
        result = verification_metrics(values, same)
        out.update({f"{kind}_{name}": result[key] for kind, key in _REPORTED.items()})
    default = "e2e" if scorer is not None else "cosine"
    out.update({kind: out[f"{kind}_{default}"] for kind in _REPORTED})
    out["verify_trials"] = len(same)
    return out
