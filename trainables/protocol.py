"""Class-disjoint validation protocols (Psomas 2020, ch. 5): a fixed split, or k class folds.

Classes, never images, are split: the validation classes are unseen in training, as the test
classes are. The split depends only on the class list and ``split_seed`` so every trial of a
study is validated on the same classes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dmlsearch.trainables.errors import UserError

__all__ = ["Split", "fixed_split", "kfold_splits", "check_disjoint"]


@dataclasses.dataclass(frozen=True)
class Split:
    """One (train classes, validation classes) pair; ``fold`` is its index in a k-fold."""

    train_classes: np.ndarray
    val_classes: np.ndarray
    fold: int = 0


def check_disjoint(split: Split) -> None:
    overlap = np.intersect1d(split.train_classes, split.val_classes)
    if overlap.size:
        raise AssertionError(f"classes {overlap.tolist()} are in both train and validation")


def fixed_split(classes: np.ndarray, *, val_ratio: float, seed: int) -> Split:
    """Hold out ``round(val_ratio · C)`` classes chosen at random (not contiguous: Psomas 2020
    §5.2)."""
    classes = np.unique(classes)
    n_val = int(round(val_ratio * len(classes)))
    if n_val < 2 or len(classes) - n_val < 2:
        raise UserError(
            f"val_ratio {val_ratio} of {len(classes)} training classes leaves {n_val} validation "
            f"and {len(classes) - n_val} training classes; both need at least 2 "
            "(choose val_ratio in (0, 1) that keeps both sides >= 2 classes)"
        )
    order = np.random.default_rng(seed).permutation(classes)
    split = Split(train_classes=np.sort(order[n_val:]), val_classes=np.sort(order[:n_val]))
    check_disjoint(split)
    return split


def kfold_splits(classes: np.ndarray, *, folds: int, seed: int) -> list[Split]:
    """k class-disjoint folds: fold i validates on group i; every class validated exactly once."""
    classes = np.unique(classes)
    if not 2 <= folds <= len(classes) // 2:
        raise UserError(
            f"folds must be between 2 and {len(classes) // 2} for {len(classes)} training classes "
            f"(each fold needs at least 2 validation classes), got {folds}"
        )
    groups = np.array_split(np.random.default_rng(seed).permutation(classes), folds)
    splits = []
    for i, group in enumerate(groups):
        rest = np.concatenate([g for j, g in enumerate(groups) if j != i])
        split = Split(train_classes=np.sort(rest), val_classes=np.sort(group), fold=i)
        check_disjoint(split)
        splits.append(split)
    validated = np.sort(np.concatenate([s.val_classes for s in splits]))
    assert np.array_equal(validated, classes), "every class must be validated exactly once"
    return splits
