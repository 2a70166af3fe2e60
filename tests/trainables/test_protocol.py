from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.protocol import fixed_split
from dmlsearch.trainables.protocol import kfold_splits


@given(n=st.integers(10, 300), ratio=st.floats(0.05, 0.5), seed=st.integers(0, 10**6))
def test_fixed_split_is_class_disjoint_and_covering(n: int, ratio: float, seed: int) -> None:
    classes = np.arange(1000, 1000 + n)
    if round(ratio * n) < 2 or n - round(ratio * n) < 2:
        with pytest.raises(UserError):
            fixed_split(classes, val_ratio=ratio, seed=seed)
        return
    split = fixed_split(classes, val_ratio=ratio, seed=seed)
    assert not np.intersect1d(split.train_classes, split.val_classes).size
    assert np.array_equal(np.union1d(split.train_classes, split.val_classes), classes)
    assert len(split.val_classes) == round(ratio * n)


def test_fixed_split_is_random_not_contiguous_and_seeded() -> None:
    classes = np.arange(100)
    a = fixed_split(classes, val_ratio=0.1, seed=1)
    assert np.array_equal(a.val_classes, fixed_split(classes, val_ratio=0.1, seed=1).val_classes)
    assert not np.array_equal(a.val_classes, fixed_split(classes, val_ratio=0.1,
                                                          seed=2).val_classes)
    assert not np.array_equal(a.val_classes, np.arange(a.val_classes[0],
                                                       a.val_classes[0] + 10))


@given(n=st.integers(4, 200), k=st.integers(2, 12), seed=st.integers(0, 10**6))
def test_kfold_validates_every_class_exactly_once(n: int, k: int, seed: int) -> None:
    classes = np.arange(n) * 3
    if k > n // 2:
        with pytest.raises(UserError, match="folds must be between 2 and"):
            kfold_splits(classes, folds=k, seed=seed)
        return
    splits = kfold_splits(classes, folds=k, seed=seed)
    assert [s.fold for s in splits] == list(range(k))
    validated = np.concatenate([s.val_classes for s in splits])
    assert sorted(validated.tolist()) == classes.tolist()  # each exactly once
    for s in splits:
        assert not np.intersect1d(s.train_classes, s.val_classes).size
        assert np.array_equal(np.union1d(s.train_classes, s.val_classes), classes)
