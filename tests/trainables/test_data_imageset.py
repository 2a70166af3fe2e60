"""ImageSet / Dataset invariants and the dataset registry (no files, no rendering)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from dmlsearch.trainables.data import Dataset
from dmlsearch.trainables.data import DatasetInfo
from dmlsearch.trainables.data import ImageSet
from dmlsearch.trainables.data import _registry
from dmlsearch.trainables.data import dataset_info
from dmlsearch.trainables.data import dataset_names
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.data import register_dataset
from dmlsearch.trainables.data import standard_split
from dmlsearch.trainables.errors import UserError


def _toy(labels: list[int], *, num_classes: int | None = None) -> ImageSet:
    """One 1 × 4 × 4 image per label whose pixels all equal its position (to track order)."""
    n = len(labels)
    images = torch.arange(n, dtype=torch.uint8).reshape(n, 1, 1, 1).expand(n, 1, 4, 4)
    k = num_classes if num_classes is not None else max(labels, default=0) + 1
    return ImageSet(
        images=images.contiguous(),
        labels=np.asarray(labels, dtype=np.int64),
        class_names=tuple(f"c{i}" for i in range(k)),
    )


def test_imageset_basics() -> None:
    images = _toy([2, 0, 1, 2, 0])
    assert len(images) == 5 and images.channels == 1 and images.image_size == 4
    assert np.array_equal(images.classes(), [0, 1, 2])
    sub = images.subset(np.array([4, 0]))
    assert sub.images[:, 0, 0, 0].tolist() == [4, 0] and sub.labels.tolist() == [0, 2]
    assert sub.class_names == images.class_names and sub.images.is_contiguous()
    chosen = images.select_classes([2])
    assert chosen.images[:, 0, 0, 0].tolist() == [0, 3] and chosen.labels.tolist() == [2, 2]
    assert len(images.select_classes([])) == 0


def test_imageset_takes_a_non_contiguous_tensor_and_int32_labels() -> None:
    images = torch.zeros(3, 4, 4, 3, dtype=torch.uint8).permute(0, 3, 1, 2)
    assert not images.is_contiguous()
    made = ImageSet(images=images, labels=np.array([0, 1, 1], np.int32), class_names=("a", "b"))
    assert made.images.is_contiguous() and made.labels.dtype == np.int64


@pytest.mark.parametrize(
    ("images", "labels", "names", "message"),
    [
        (torch.zeros(2, 1, 4, 4), [0, 1], ("a", "b"), "uint8"),
        (torch.zeros(2, 4, 4, dtype=torch.uint8), [0, 1], ("a", "b"), "uint8"),
        (torch.zeros(2, 2, 4, 4, dtype=torch.uint8), [0, 1], ("a", "b"), "channels"),
        (torch.zeros(2, 1, 4, 4, dtype=torch.uint8), [0], ("a", "b"), "shape"),
        (torch.zeros(2, 1, 4, 4, dtype=torch.uint8), [0, 2], ("a", "b"), "0..1"),
        (torch.zeros(2, 1, 4, 4, dtype=torch.uint8), [0.0, 1.5], ("a", "b"), "integers"),
    ],
)
def test_imageset_rejects_bad_fields(
    images: torch.Tensor, labels: list[float], names: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ImageSet(images=images, labels=np.asarray(labels), class_names=names)


def test_select_classes_rejects_unknown_ids_and_subset_rejects_masks() -> None:
    images = _toy([0, 1])
    with pytest.raises(ValueError, match="0..1"):
        images.select_classes([5])
    with pytest.raises(ValueError, match="integer positions"):
        images.subset(np.array([True, False]))


@settings(max_examples=60, deadline=None)
@given(
    labels=st.lists(st.integers(0, 7), min_size=0, max_size=40),
    wanted=st.sets(st.integers(0, 7)),
)
def test_select_classes_keeps_exactly_those_labels_in_order(
    labels: list[int], wanted: set[int]
) -> None:
    images = _toy(labels, num_classes=8)
    chosen = images.select_classes(sorted(wanted))
    expected = [i for i, label in enumerate(labels) if label in wanted]
    assert chosen.images[:, 0, 0, 0].tolist() == expected
    assert chosen.labels.tolist() == [labels[i] for i in expected]
    assert set(chosen.classes().tolist()) == wanted & set(labels)


@given(k=st.integers(2, 500))
def test_standard_split_is_first_half_disjoint_and_covering(k: int) -> None:
    train, test = standard_split(k)
    assert np.array_equal(np.concatenate([train, test]), np.arange(k))
    assert len(train) == k // 2 and len(test) == k - k // 2


def test_dataset_split_and_validation() -> None:
    images = _toy([0, 1, 2, 3, 4, 0, 1, 2, 3, 4])
    dataset = Dataset.with_standard_split(name="toy", images=images)
    assert dataset.train_classes.tolist() == [0, 1] and dataset.test_classes.tolist() == [2, 3, 4]
    assert dataset.train().labels.tolist() == [0, 1, 0, 1]
    assert set(dataset.test().labels.tolist()) == {2, 3, 4}
    with pytest.raises(ValueError, match="overlap"):
        Dataset(name="bad", images=images, train_classes=np.array([0, 1, 2]),
                test_classes=np.array([2, 3, 4]))
    with pytest.raises(ValueError, match="cover"):
        Dataset(name="bad", images=images, train_classes=np.array([0, 1]),
                test_classes=np.array([3, 4]))
    with pytest.raises(ValueError, match="at least 2"):
        standard_split(1)


def test_registry_lists_the_built_in_datasets() -> None:
    assert {"glyphs", "omniglot", "folder"} <= set(dataset_names())
    assert dataset_names() == sorted(dataset_names())
    info = dataset_info("omniglot")
    assert isinstance(info, DatasetInfo) and info.needs_root and "<alphabet>" in info.layout
    assert not dataset_info("glyphs").needs_root


def test_unknown_dataset_lists_the_valid_names() -> None:
    with pytest.raises(UserError) as caught:
        load_dataset("cub201")
    message = str(caught.value)
    assert "'cub201'" in message and "\n" not in message
    for name in dataset_names():
        assert name in message


@pytest.mark.parametrize("name", ["omniglot", "folder"])
def test_a_dataset_that_reads_files_needs_a_root(name: str) -> None:
    with pytest.raises(UserError) as caught:
        load_dataset(name)
    message = str(caught.value)
    assert "--data-root DIR" in message and dataset_info(name).layout in message
    assert "\n" not in message


@pytest.mark.parametrize("size", [0, 4, 5000, 32.0, True, "32"])
def test_bad_image_size_is_a_user_error(size: object) -> None:
    with pytest.raises(UserError, match="image size"):
        load_dataset("glyphs", image_size=size)  # type: ignore[arg-type]


def test_register_dataset_decorator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry, "_DATASETS", _registry._DATASETS.copy())
    seen: dict[str, object] = {}

    @register_dataset("toy", description="two tiny classes")
    def build(*, root: str | None, image_size: int, seed: int) -> Dataset:
        seen.update(root=root, image_size=image_size, seed=seed)
        images = ImageSet(
            images=torch.zeros(2, 1, image_size, image_size, dtype=torch.uint8),
            labels=np.array([0, 1]),
            class_names=("a", "b"),
        )
        return Dataset.with_standard_split(name="toy", images=images)

    assert "toy" in dataset_names() and dataset_info("toy").builder is build
    dataset = load_dataset("toy", root="~/ignored", image_size=8, seed=7)
    assert seen == {"root": None, "image_size": 8, "seed": 7}
    assert dataset.images.image_size == 8
    with pytest.raises(RuntimeError, match="registered twice"):
        register_dataset("toy", description="again")(build)
    with pytest.raises(ValueError, match="layout"):
        register_dataset("toy2", description="files", needs_root=True)(build)
