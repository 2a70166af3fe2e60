"""Verification metrics of scored trials: EER, AUC and minDCF of the ROC (Monteiro et al. 2020).

A trial is a pair of items with a score (higher = more likely the same class) and a label (same
class or not). Re-exported by :mod:`trainables.metrics`; only NumPy is needed here.

**ROC.** Sorting the scores in decreasing order and accepting every trial scored at or above a
threshold gives one ROC point per *distinct* score (tied scores enter together), plus (0, 0):
exactly the points of :func:`sklearn.metrics.roc_curve` with ``drop_intermediate=False``.

**AUC** is the trapezoidal area under those points, i.e. :func:`sklearn.metrics.roc_auc_score`:
a tie between a positive and a negative counts one half. The paper reports 1-AUC (Monteiro et
al. 2020, Table 1); it is returned too.

**EER** (Monteiro et al. 2020 §4: the operating point where miss and false-alarm rates are
equal). Between two adjacent ROC points the curve is taken as the straight segment that
randomising between their two thresholds achieves; the EER is where that segment meets the line
miss rate = false-alarm rate, i.e. with ``g = fnr - fpr`` (decreasing from 1 to -1) and k the
first point with ``g_k <= 0``: ``eer = fpr_{k-1} + g_{k-1} / (g_{k-1} - g_k) * (fpr_k -
fpr_{k-1})``, at which fnr equals fpr exactly. The reference code (``utils.compute_eer``) takes
instead the single ROC point nearest the diagonal, ``(fnr_t + fpr_t) / 2``; the two agree when a
ROC point lies on the diagonal and differ by at most half a segment otherwise.

**minDCF** (the NIST speaker-recognition cost, as VoxCeleb results report it at p_target 0.01 and
0.05, e.g. Kaldi's ``compute_min_dcf.py``): over every ROC point (the thresholds above, plus
accepting nothing), ``C = C_miss · fnr · p + C_fa · fpr · (1 − p)`` with ``C_miss = C_fa = 1``,
its minimum divided by the cost of the best trivial system, ``min(p, 1 − p)``.

Memory: about 17 bytes per trial besides the inputs (sort order and cumulative counts), so
10⁸ trials need about 1.7 GB; cap the number of trials (``verify_pairs``) for larger sets.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dmlsearch.trainables.errors import UserError

__all__ = ["DCF_TARGETS", "det_points", "min_dcf", "verification_metrics"]

DCF_TARGETS: tuple[float, ...] = (0.01, 0.05)
"""The prior probabilities of a target trial at which minDCF is reported."""


def _as_1d(value: Any, name: str) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch.Tensor (torch not imported)
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.ndim != 1:
        raise UserError(
            f"{name}: expected a 1-D array (one entry per trial), got shape {arr.shape}; "
            "fix: pass one score and one same-class flag per pair"
        )
    return arr


def verification_metrics(scores: Any, same_class: Any) -> dict[str, float]:
    """EER, AUC and 1-AUC of verification trials (see the module docstring for the method).

    Args:
        scores: ``[M]`` real scores, higher = more likely the same class (cosine similarity,
            D's probability, ...). NumPy array, sequence or ``torch.Tensor``.
        same_class: ``[M]`` bools (or 0/1): is the pair of the same class.

    Returns:
        ``{"eer", "auc", "1-auc", "eer_threshold", "positives", "negatives"}`` and
        ``mindcf_<p>`` for each p of :data:`DCF_TARGETS` (``mindcf_0.01``, ``mindcf_0.05``);
        the rates are fractions in [0, 1]. ``eer_threshold`` is the score of the ROC point
        that ends the segment crossing the diagonal (accepting scores >= it gives fpr >= fnr).

    Raises:
        UserError: mismatched lengths, non-finite scores, or trials of only one kind (EER and
            AUC need both same-class and different-class pairs).
    """
    fpr, tpr, s_sorted, ends = _roc(scores, same_class)
    positives, negatives = _counts(same_class)
    auc = float(np.trapezoid(tpr, fpr))

    g = (1.0 - tpr) - fpr  # non-increasing: 1 at (0, 0), -1 at (1, 1)
    k = int(np.argmax(g <= 0))  # first point on or past the diagonal (k >= 1)
    if g[k] == 0:
        eer = fpr[k]
    else:
        t = g[k - 1] / (g[k - 1] - g[k])
        eer = fpr[k - 1] + t * (fpr[k] - fpr[k - 1])
    out = {
        "eer": float(eer),
        "auc": auc,
        "1-auc": 1.0 - auc,
        "eer_threshold": float(s_sorted[ends[k - 1]]),
        "positives": positives,
        "negatives": negatives,
    }
    out.update({f"mindcf_{p:g}": _min_dcf(fpr, tpr, p) for p in DCF_TARGETS})
    return out


def _counts(same_class: Any) -> tuple[int, int]:
    y = _as_1d(same_class, "same_class").astype(bool)
    positives = int(np.count_nonzero(y))
    return positives, len(y) - positives


def _min_dcf(fpr: np.ndarray, tpr: np.ndarray, p_target: float) -> float:
    cost = (1.0 - tpr) * p_target + fpr * (1.0 - p_target)
    return float(cost.min() / min(p_target, 1.0 - p_target))


def min_dcf(scores: Any, same_class: Any, p_target: float) -> float:
    """Normalised minimum detection cost at prior ``p_target`` (C_miss = C_fa = 1)."""
    if not 0.0 < p_target < 1.0:
        raise UserError(f"p_target must be in (0, 1), got {p_target}")
    fpr, tpr, _, _ = _roc(scores, same_class)
    return _min_dcf(fpr, tpr, p_target)


def det_points(scores: Any, same_class: Any) -> tuple[np.ndarray, np.ndarray]:
    """(false-alarm rates, miss rates) of every ROC point, for a DET curve."""
    fpr, tpr, _, _ = _roc(scores, same_class)
    return fpr, 1.0 - tpr


def _roc(scores: Any, same_class: Any
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, scores sorted decreasing, end index of each run of equal scores): the ROC
    points of the module's notes, checked inputs."""
    s = _as_1d(scores, "scores")
    y = _as_1d(same_class, "same_class").astype(bool)
    if len(s) != len(y):
        raise UserError(
            f"same_class: expected {len(s)} entries (one per score), got {len(y)}; "
            "fix: pass the labels of exactly the scored pairs"
        )
    if not np.issubdtype(s.dtype, np.number) or not np.isfinite(s).all():
        raise UserError(
            "scores: expected finite numbers, got NaN, inf or non-numbers; "
            "fix: look for a diverged model (NaN loss)"
        )
    positives = int(np.count_nonzero(y))
    negatives = len(y) - positives
    if positives == 0 or negatives == 0:
        raise UserError(
            f"same_class: expected both same-class and different-class pairs, got {positives} "
            f"and {negatives}; fix: evaluate on a set with at least 2 classes and a class "
            "with 2 or more items"
        )
    order = np.argsort(s, kind="stable")[::-1]
    s_sorted = s[order]
    # Index of the last trial of each run of equal scores: one ROC point per distinct score.
    ends = np.r_[np.flatnonzero(s_sorted[1:] != s_sorted[:-1]), len(s_sorted) - 1]
    tps = np.cumsum(y[order], dtype=np.int64)[ends]
    fps = ends + 1 - tps
    tpr = np.r_[0.0, tps / positives]
    fpr = np.r_[0.0, fps / negatives]
    return fpr, tpr, s_sorted, ends
