from __future__ import annotations

import numpy as np
import pytest

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.sampling import make_batches


def _labels(sizes: list[int]) -> np.ndarray:
    return np.concatenate([np.full(n, c) for c, n in enumerate(sizes)])


def test_m_per_class_batches_have_m_images_of_distinct_classes() -> None:
    labels = _labels([20] * 30 + [3, 5])
    batches = list(make_batches("m_per_class", labels, batch_size=32, m=4,
                                rng=np.random.default_rng(0)))
    assert len(batches) == len(labels) // 32
    for batch in batches:
        classes, counts = np.unique(labels[batch], return_counts=True)
        assert len(classes) == 8 and (counts == 4).all()
    # Cycling through each class's images: within a class no image repeats before all were seen.
    seen = np.concatenate(batches)
    for c in range(30):
        picks = [i for i in seen if labels[i] == c][:20]
        assert len(set(picks)) == len(picks)


def test_samplers_are_deterministic_for_a_seed() -> None:
    labels = _labels([10] * 12)
    for name in ("m_per_class", "random"):
        a = list(make_batches(name, labels, batch_size=16, m=4, rng=np.random.default_rng(3)))
        b = list(make_batches(name, labels, batch_size=16, m=4, rng=np.random.default_rng(3)))
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_too_few_classes_for_a_batch_is_a_user_error() -> None:
    with pytest.raises(UserError, match="needs 16 classes per batch"):
        list(make_batches("m_per_class", _labels([50] * 5), batch_size=64, m=4,
                          rng=np.random.default_rng(0)))


def test_unknown_sampler_lists_valid_names() -> None:
    with pytest.raises(UserError, match="m_per_class, random"):
        make_batches("balanced", _labels([10] * 5), batch_size=4, m=2,
                     rng=np.random.default_rng(0))
