"""The batch API: in-memory and file-backed sets give the same kind of batches.

Checked: shapes, dtypes, labels and order; the eval transform equals torchvision's reference
``Resize + CenterCrop`` and is deterministic (any worker count); the train transform is random
but reproducible from its seed; a corrupt or missing file is a one-line UserError naming it.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image

from dmlsearch.trainables.data import BatchLoader
from dmlsearch.trainables.data import FileImageSet
from dmlsearch.trainables.data import ImageSet
from dmlsearch.trainables.data import SetLoader
from dmlsearch.trainables.data import TransformSpec
from dmlsearch.trainables.data import eval_resize
from dmlsearch.trainables.data import iterate_batches
from dmlsearch.trainables.data import sequential_batches
from dmlsearch.trainables.data._transforms import rrc_box
from dmlsearch.trainables.errors import UserError


def _write_photos(top: Path, *, classes: int = 3, per_class: int = 4) -> FileImageSet:
    """Noisy JPEGs of different shapes (so crops and flips show), class-per-folder."""
    rng = np.random.default_rng(0)
    files, labels = [], []
    for c in range(classes):
        for i in range(per_class):
            width, height = (48, 36) if i % 2 else (30, 44)
            pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            path = top / f"class{c}" / f"{i}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(path, quality=90)
            files.append(f"class{c}/{i}.jpg")
            labels.append(c)
    return FileImageSet(
        root=str(top), files=np.asarray(files, dtype=object), labels=np.asarray(labels),
        class_names=tuple(f"class{c}" for c in range(classes)),
        transform=TransformSpec.for_size(16), dataset="photos",
    )


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> FileImageSet:
    return _write_photos(tmp_path_factory.mktemp("photos"))


BATCHES = [np.array([5, 0, 11]), np.array([3, 3]), np.array([7, 1, 2, 9, 10])]


def _run(images, batches=BATCHES, **options) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(iterate_batches(images, batches, **options))


# ---------------------------------------------------------------------------------------------
# In memory: direct indexing


def test_in_memory_batches() -> None:
    images = torch.randint(0, 256, (12, 1, 8, 8), dtype=torch.uint8)
    labels = np.arange(12) % 4
    memory = ImageSet(images=images, labels=labels, class_names=("a", "b", "c", "d"))
    for train in (False, True):
        out = _run(memory, train=train)
        assert len(out) == 3
        for (x, y), idx in zip(out, BATCHES):
            assert x.dtype == torch.uint8 and y.dtype == torch.int64
            assert torch.equal(x, images[torch.from_numpy(idx)])
            assert y.tolist() == labels[idx].tolist()


# ---------------------------------------------------------------------------------------------
# File-backed: the transforms


def test_eval_batches_match_torchvision(photos: FileImageSet) -> None:
    reference = T.Compose([T.Resize(eval_resize(16)), T.CenterCrop(16), T.PILToTensor()])
    out = _run(photos, train=False)
    for (x, y), idx in zip(out, BATCHES):
        assert tuple(x.shape) == (len(idx), 3, 16, 16) and x.dtype == torch.uint8
        assert y.dtype == torch.int64 and y.tolist() == photos.labels[idx].tolist()
        for row, i in zip(x, idx):
            with Image.open(Path(photos.root) / photos.files[i]) as image:
                assert torch.equal(row, reference(image.convert("RGB")))
    again = _run(photos, train=False)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(out, again))


def test_train_transform_is_random_but_seeded(photos: FileImageSet) -> None:
    first = _run(photos, train=True, seed=3)
    same = _run(photos, train=True, seed=3)
    other = _run(photos, train=True, seed=4)
    evaluation = _run(photos, train=False)
    for a, b, c, e in zip(first, same, other, evaluation):
        assert tuple(a[0].shape) == tuple(e[0].shape) and torch.equal(a[1], e[1])
        assert torch.equal(a[0], b[0])
    assert not all(torch.equal(a[0], c[0]) for a, c in zip(first, other))
    assert not all(torch.equal(a[0], e[0]) for a, e in zip(first, evaluation))
    # without a seed, torch's global RNG decides
    torch.manual_seed(11)
    global_a = _run(photos, train=True)
    torch.manual_seed(11)
    global_b = _run(photos, train=True)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(global_a, global_b))


@pytest.mark.parametrize("mode", ["rrc", "resize_crop", "none"])
def test_train_modes_and_grey(photos: FileImageSet, mode: str) -> None:
    spec = TransformSpec(size=12, resize=20, train_mode=mode, channels=1)
    grey = photos.with_transform(spec)
    (x, y), = _run(grey, [np.arange(12)], train=True, seed=0)
    assert tuple(x.shape) == (12, 1, 12, 12) and grey.channels == 1 and grey.image_size == 12
    (e, _), = _run(grey, [np.arange(12)], train=False)
    assert torch.equal(x, e) == (mode == "none")


def test_rrc_box_stays_inside() -> None:
    rng = np.random.default_rng(0)
    for width, height in [(40, 30), (30, 44), (5, 200), (300, 3)]:
        for _ in range(50):
            top, left, h, w = rrc_box(width, height, rng)
            assert 0 <= top and top + h <= height and 0 <= left and left + w <= width
            assert h > 0 and w > 0


# ---------------------------------------------------------------------------------------------
# Workers


def test_workers_and_persistent_epochs(photos: FileImageSet) -> None:
    single = _run(photos, train=False)
    with BatchLoader(photos, train=False, workers=2) as loader:
        for _ in range(2):  # the same worker processes serve both epochs
            out = list(loader.epoch(BATCHES))
            assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                       for a, b in zip(out, single))
        partial = loader.epoch([np.arange(12)] * 3)
        next(partial)  # an epoch left unfinished ...
        shuffled = [np.array([11, 10]), np.array([0])]
        out = list(loader.epoch(shuffled))  # ... does not leak into the next one
        assert [y.tolist() for _, y in out] == [[2, 2], [0]]
        assert torch.equal(out[1][0][0], single[0][0][1])
    with pytest.raises(RuntimeError, match="closed"):
        loader.epoch(BATCHES)
    seeded = [list(BatchLoader(photos, train=True, workers=2, seed=5, persistent=False)
                   .epoch(BATCHES)) for _ in range(2)]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(*seeded))


def test_zip_backed_set_with_workers(photos: FileImageSet, tmp_path: Path) -> None:
    archive = tmp_path / "photos.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        for name in photos.files:
            packed.write(Path(photos.root) / name, name)
    zipped = FileImageSet(root=str(archive), files=photos.files, labels=photos.labels,
                          class_names=photos.class_names, transform=photos.transform,
                          archive=True)
    zipped.decode(0)  # the archive is opened here first, then workers fork
    out = _run(zipped, train=False, workers=2)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(out, _run(photos, train=False)))
    assert zipped.describe(3) == f"{archive}!class0/3.jpg"


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("workers", [0, 2])
def test_corrupt_or_missing_image_names_the_file(tmp_path: Path, workers: int) -> None:
    photos = _write_photos(tmp_path / "photos")
    bad = Path(photos.root) / "class1" / "2.jpg"
    bad.write_bytes(bad.read_bytes()[:60])  # truncated JPEG
    with pytest.raises(UserError) as caught:
        _run(photos, [np.arange(12)], train=True, workers=workers)
    message = str(caught.value)
    assert "\n" not in message and "cannot read image" in message
    assert str(bad) in message and "photos" in message
    (Path(photos.root) / "class2" / "0.jpg").unlink()
    with pytest.raises(UserError, match=r"class2/0\.jpg"):
        _run(photos, [np.array([8])], train=False, workers=workers)


def test_bad_batches(photos: FileImageSet) -> None:
    with pytest.raises(ValueError, match="0..11"):
        _run(photos, [np.array([12])], train=False)
    with pytest.raises(ValueError, match="non-empty"):
        _run(photos, [np.array([], dtype=np.int64)], train=False)
    with pytest.raises(UserError, match="workers"):
        BatchLoader(photos, train=False, workers=-1)


def test_file_set_selects_like_image_set(photos: FileImageSet) -> None:
    picked = photos.select_classes([2, 0])
    assert isinstance(picked, FileImageSet) and len(picked) == 8
    assert picked.classes().tolist() == [0, 2] and picked.num_classes == 3
    assert list(picked.files[:4]) == list(photos.files[:4])
    sub = photos.subset(np.array([4, 1]))
    assert sub.labels.tolist() == [1, 0] and sub.image_size == 16 and sub.channels == 3
    (x, y), = _run(sub, [np.array([1, 0])], train=False)
    (ref, _), = _run(photos, [np.array([1, 4])], train=False)
    assert torch.equal(x, ref) and y.tolist() == [0, 1]
    assert sequential_batches(5, 2)[-1].tolist() == [4]


class _FeatureSet:
    """A set that serves its own batches (as an audio set does): float features [B, 2, T]."""

    def __init__(self, n: int) -> None:
        self.labels = np.arange(n, dtype=np.int64) % 3
        self.closed = False
        self.calls: list[dict[str, object]] = []

    def __len__(self) -> int:
        return len(self.labels)

    def batch_loader(self, *, train, workers, seed, device):
        self.calls.append({"train": train, "workers": workers, "seed": seed, "device": device})
        owner = self

        class Loader:
            def epoch(self, batches):
                for idx in batches:
                    x = torch.arange(len(idx) * 2 * 5, dtype=torch.float32).view(len(idx), 2, 5)
                    yield x + torch.from_numpy(idx).view(-1, 1, 1), torch.from_numpy(
                        owner.labels[idx])

            def close(self):
                owner.closed = True

        loader = Loader()
        assert isinstance(loader, SetLoader)
        return loader


def test_a_set_with_its_own_batch_loader_is_served_by_it():
    features = _FeatureSet(7)
    with BatchLoader(features, train=True, workers=1, seed=5) as loader:
        out = list(loader.epoch([np.array([0, 1]), np.array([6])]))
    assert features.calls == [{"train": True, "workers": 1, "seed": 5,
                               "device": torch.device("cpu")}]
    assert [tuple(x.shape) for x, _ in out] == [(2, 2, 5), (1, 2, 5)]
    assert out[1][0][0, 0, 0].item() == 6.0 and out[1][1].tolist() == [0]
    assert features.closed
    with pytest.raises(ValueError, match="indices"):  # the same checks as for image sets
        BatchLoader(features, train=False).epoch([np.array([7])])
