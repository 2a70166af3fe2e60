"""Readers of the official layouts (CUB, CARS196, SOP, Cifar-10, Mini-ImageNet), on tiny fakes.

Each test writes a few generated images per class in the dataset's official layout under
``tmp_path`` and checks counts, labels, class names, the standard split and the one-line errors
for incomplete folders.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch
from PIL import Image

from dmlsearch.trainables.data import Dataset
from dmlsearch.trainables.data import FileImageSet
from dmlsearch.trainables.data import ImageSet
from dmlsearch.trainables.data import _folder
from dmlsearch.trainables.data import iterate_batches
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.data._batches import sequential_batches
from tests.trainables._data_helpers import user_error as _user_error

CLASS_COLOURS = [(220, 30, 30), (30, 220, 30), (30, 30, 220), (220, 220, 30)]


def _assert_refused(name: str, root: Path, *phrases: str) -> None:
    """Loading ``name`` from ``root`` is a one-line UserError that says every one of
    ``phrases``."""
    message = _user_error(name, root)
    missing = [phrase for phrase in phrases if phrase not in message]
    assert not missing, f"{missing} not in {message!r}"


def _jpeg(path: Path, colour: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path, quality=95)




def _mean_colours(dataset: Dataset, size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Mean RGB of every image (eval transform) and its label."""
    images = dataset.images
    pixels, labels = [], []
    for x, y in iterate_batches(images, sequential_batches(len(images), 16), train=False):
        pixels.append(x.float().mean(dim=(2, 3)))
        labels.append(y)
    return torch.cat(pixels).numpy(), torch.cat(labels).numpy()


def _assert_colours_follow_labels(dataset: Dataset, colours: list[tuple[int, int, int]]) -> None:
    means, labels = _mean_colours(dataset)
    assert np.array_equal(labels, dataset.images.labels)
    expected = np.asarray([colours[label] for label in labels], dtype=np.float32)
    assert np.abs(means - expected).max() < 12


# ---------------------------------------------------------------------------------------------
# CUB-200-2011


def _write_cub(parent: Path, *, classes: int = 4, per_class: int = 3) -> Path:
    top = parent / "CUB_200_2011"
    names = [f"{c + 1:03d}.Bird_{c + 1}" for c in range(classes)]
    entries = []  # (image id, path, class id)
    image_id = 1
    for c, name in enumerate(names):
        for i in range(per_class):
            rel = f"{name}/{name[4:]}_{i:04d}.jpg"
            _jpeg(top / "images" / rel, CLASS_COLOURS[c])
            entries.append((image_id, rel, c + 1))
            image_id += 1
    order = entries[::2] + entries[1::2]  # ids not in class order in the lists
    (top / "images.txt").write_text("".join(f"{i} {p}\n" for i, p, _ in order))
    (top / "image_class_labels.txt").write_text("".join(f"{i} {c}\n" for i, _, c in entries))
    (top / "classes.txt").write_text("".join(f"{c + 1} {n}\n" for c, n in enumerate(names)))
    (top / "train_test_split.txt").write_text("".join(f"{i} 1\n" for i, _, _ in entries))
    return top


def test_cub200(tmp_path: Path) -> None:
    top = _write_cub(tmp_path)
    dataset = load_dataset("cub200", root=str(tmp_path), image_size=8)
    images = dataset.images
    assert isinstance(images, FileImageSet) and len(images) == 12
    assert images.class_names == ("001.Bird_1", "002.Bird_2", "003.Bird_3", "004.Bird_4")
    assert dataset.train_classes.tolist() == [0, 1] and dataset.test_classes.tolist() == [2, 3]
    assert np.bincount(images.labels).tolist() == [3, 3, 3, 3]
    assert images.files[0] == os.path.join("images", "001.Bird_1/Bird_1_0000.jpg")
    assert images.labels[:6].tolist() == [0, 0, 1, 2, 2, 3]  # images.txt order: ids 1, 3, ...
    assert (images.image_size, images.channels) == (8, 3)
    _assert_colours_follow_labels(dataset, CLASS_COLOURS)
    direct = load_dataset("cub200", root=str(top), image_size=8)
    assert list(direct.images.files) == list(images.files)
    assert len(dataset.train()) == 6 and set(dataset.test().labels.tolist()) == {2, 3}
    # the reference transforms at 224 by default
    default = load_dataset("cub200", root=str(top)).images
    assert (default.transform.size, default.transform.resize) == (224, 256)


def test_cub200_incomplete(tmp_path: Path) -> None:
    top = _write_cub(tmp_path)
    (top / "image_class_labels.txt").unlink()
    _assert_refused("cub200", tmp_path, "lacks image_class_labels.txt", "CUB_200_2011",
                    "images.txt (<image_id> <path>)")  # what is missing, the layout expected

    top = _write_cub(tmp_path / "b")
    (top / "images" / "003.Bird_3" / "Bird_3_0001.jpg").unlink()
    _assert_refused("cub200", top, "1 of the 12 images listed in", "Bird_3_0001.jpg")

    (top / "images.txt").write_text("1 001.Bird_1/Bird_1_0000.jpg\nnot-a-line\n")
    _assert_refused("cub200", top, "line 2 should have 2 fields")

    _assert_refused("cub200", tmp_path / "nowhere", "does not exist")
    (tmp_path / "CUB_200_2011.tgz").write_bytes(b"archive")
    _assert_refused("cub200", tmp_path / "CUB_200_2011.tgz", "is a file")


# ---------------------------------------------------------------------------------------------
# CARS196


def _write_cars(top: Path, *, classes: int = 4, per_class: int = 3) -> Path:
    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    rows = []
    for n in range(classes * per_class):
        c = n % classes  # classes interleaved, as in the official file
        rel = f"car_ims/{n + 1:06d}.jpg"
        _jpeg(top / rel, CLASS_COLOURS[c])
        rows.append((rel, np.uint8(1), np.uint8(2), np.uint16(39), np.uint16(29),
                     np.uint8(c + 1), np.uint8(n % 2)))
    annotations = np.zeros((1, len(rows)), dtype=[(f, "O") for f in fields])
    for n, row in enumerate(rows):
        annotations[0, n] = row
    names = np.empty((1, classes), dtype=object)
    names[0, :] = [f"Maker Model {2000 + c}" for c in range(classes)]
    scipy.io.savemat(top / "cars_annos.mat", {"annotations": annotations, "class_names": names})
    return top


def test_cars196(tmp_path: Path) -> None:
    top = _write_cars(tmp_path / "stanford_cars")
    dataset = load_dataset("cars196", root=str(tmp_path), image_size=8)  # the folder above
    images = dataset.images
    assert isinstance(images, FileImageSet) and len(images) == 12
    assert images.class_names == tuple(f"Maker Model {2000 + c}" for c in range(4))
    assert images.labels.tolist() == [0, 1, 2, 3] * 3
    assert images.files[0] == "car_ims/000001.jpg"
    assert dataset.train_classes.tolist() == [0, 1] and dataset.test_classes.tolist() == [2, 3]
    _assert_colours_follow_labels(dataset, CLASS_COLOURS)
    assert len(load_dataset("cars196", root=str(top), image_size=8).images) == 12


def test_cars196_incomplete(tmp_path: Path) -> None:
    top = _write_cars(tmp_path / "cars")
    (top / "car_ims" / "000005.jpg").unlink()
    _assert_refused("cars196", top, "1 of the 12 images listed in", "car_ims/000005.jpg")

    scipy.io.savemat(top / "cars_annos.mat", {"something": np.zeros(3)})
    _assert_refused("cars196", top, "no 'annotations' struct array", "something")

    (top / "cars_annos.mat").unlink()
    _assert_refused("cars196", top, "lacks cars_annos.mat", "car_ims")


# ---------------------------------------------------------------------------------------------
# Stanford Online Products


def _write_sop(parent: Path) -> Path:
    top = parent / "Stanford_Online_Products"
    header = "image_id class_id super_class_id path\n"
    lines = {"Ebay_train.txt": [header], "Ebay_test.txt": [header]}
    image_id = 1
    for class_id, (folder, super_id) in enumerate(
        [("bicycle_final", 1), ("chair_final", 2), ("bicycle_final", 1), ("sofa_final", 3)],
        start=1,
    ):
        split = "Ebay_train.txt" if class_id <= 2 else "Ebay_test.txt"
        for i in range(2 + class_id % 2):
            rel = f"{folder}/{1000 + class_id}_{i}.JPG"
            _jpeg(top / rel, CLASS_COLOURS[class_id - 1])
            lines[split].append(f"{image_id} {class_id} {super_id} {rel}\n")
            image_id += 1
    for name, content in lines.items():
        (top / name).write_text("".join(content))
    return top


def test_sop(tmp_path: Path) -> None:
    top = _write_sop(tmp_path)
    dataset = load_dataset("sop", root=str(tmp_path), image_size=8)
    images = dataset.images
    assert isinstance(images, FileImageSet) and len(images) == 3 + 2 + 3 + 2
    assert images.class_names == (
        "bicycle_final/1", "chair_final/2", "bicycle_final/3", "sofa_final/4"
    )
    assert images.labels.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]
    assert dataset.train_classes.tolist() == [0, 1] and dataset.test_classes.tolist() == [2, 3]
    assert images.files[3] == "chair_final/1002_0.JPG"
    _assert_colours_follow_labels(dataset, CLASS_COLOURS)
    assert len(load_dataset("sop", root=str(top), image_size=8).images) == 10


def test_sop_incomplete(tmp_path: Path) -> None:
    top = _write_sop(tmp_path)
    (top / "Ebay_test.txt").unlink()
    _assert_refused("sop", tmp_path, "lacks Ebay_test.txt", "Ebay_train.txt")

    top = _write_sop(tmp_path / "b")
    with open(top / "Ebay_test.txt", "a") as handle:
        handle.write("99 1 1 bicycle_final/1001_0.JPG\n")  # a training class in the test file
    _assert_refused("sop", top, "are in both")

    top = _write_sop(tmp_path / "c")
    (top / "sofa_final" / "1004_1.JPG").unlink()
    _assert_refused("sop", top, "Ebay_test.txt", "sofa_final/1004_1.JPG")


# ---------------------------------------------------------------------------------------------
# Cifar-10


def _write_cifar(parent: Path, *, per_batch: int = 4, protocol: int = 2) -> Path:
    top = parent / "cifar-10-batches-py"
    top.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for n, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        labels = [(n * per_batch + i) % 10 for i in range(per_batch)]
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        data[:, :1024] = np.asarray(labels, dtype=np.uint8)[:, None] * 20  # red plane = label
        content = {b"batch_label": name.encode(), b"labels": labels, b"data": data,
                   b"filenames": [f"img_{i}.png".encode() for i in range(per_batch)]}
        with open(top / name, "wb") as handle:
            pickle.dump(content, handle, protocol=protocol)
    names = [n.encode() for n in ("airplane", "automobile", "bird", "cat", "deer", "dog",
                                  "frog", "horse", "ship", "truck")]
    with open(top / "batches.meta", "wb") as handle:
        pickle.dump({b"label_names": names, b"num_vis": 3072, b"num_cases_per_batch": per_batch},
                    handle, protocol=protocol)
    return top


@pytest.mark.parametrize("protocol", [2, 4])
def test_cifar10(tmp_path: Path, protocol: int) -> None:
    top = _write_cifar(tmp_path, protocol=protocol)
    dataset = load_dataset("cifar10", root=str(tmp_path))
    images = dataset.images
    assert isinstance(images, ImageSet)
    assert tuple(images.images.shape) == (24, 3, 32, 32) and images.image_size == 32
    assert images.labels.tolist() == [i % 10 for i in range(24)]  # batches 1..5, then test
    assert images.class_names[:2] == ("airplane", "automobile") and images.num_classes == 10
    assert torch.equal(images.images[:, 0, 0, 0], torch.from_numpy(images.labels * 20).byte())
    assert dataset.train_classes.tolist() == [0, 1, 2, 3, 4]
    assert dataset.test_classes.tolist() == [5, 6, 7, 8, 9]
    resized = load_dataset("cifar10", root=str(top), image_size=16).images
    assert tuple(resized.images.shape) == (24, 3, 16, 16)
    assert torch.equal(resized.images[:, 0].amax(dim=(1, 2)), images.images[:, 0, 0, 0])


class _Evil:
    def __reduce__(self) -> tuple:
        return (os.system, ("echo owned > /dev/null",))


def test_cifar10_refuses_code_and_missing_files(tmp_path: Path) -> None:
    top = _write_cifar(tmp_path)
    with open(top / "data_batch_3", "wb") as handle:
        pickle.dump({b"data": _Evil(), b"labels": []}, handle)
    _assert_refused("cifar10", top, "data_batch_3", "refusing to load")

    (top / "test_batch").unlink()
    _assert_refused("cifar10", tmp_path, "lacks test_batch", "data_batch_1 ... data_batch_5")


# ---------------------------------------------------------------------------------------------
# Mini-ImageNet


def _write_mini_imagenet(top: Path) -> Path:
    splits = {"train.csv": ["n02", "n01"], "val.csv": ["n03"], "test.csv": ["n05", "n04"]}
    colour = {"n01": 0, "n02": 1, "n03": 2, "n04": 3, "n05": 0}
    for split, wnids in splits.items():
        lines = ["filename,label\n"]
        for wnid in wnids:
            for i in range(3):
                name = f"{wnid}{i:08d}.jpg"
                _jpeg(top / "images" / name, CLASS_COLOURS[colour[wnid]], size=(84, 84))
                lines.append(f"{name},{wnid}\n")
        (top / split).write_text("".join(lines))
    return top


def test_mini_imagenet(tmp_path: Path) -> None:
    top = _write_mini_imagenet(tmp_path / "mini-imagenet")
    dataset = load_dataset("mini_imagenet", root=str(tmp_path))
    images = dataset.images
    assert isinstance(images, FileImageSet) and len(images) == 15
    assert images.class_names == ("n01", "n02", "n03", "n04", "n05")
    assert dataset.train_classes.tolist() == [0, 1]
    assert dataset.val_classes.tolist() == [2]
    assert dataset.test_classes.tolist() == [3, 4]
    assert images.labels.tolist() == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3 + [4] * 3
    assert (images.image_size, images.transform.resize) == (84, 84)  # the native 84 × 84
    assert len(dataset.train()) == 6 and len(dataset.val()) == 3 and len(dataset.test()) == 6
    small = load_dataset("mini_imagenet", root=str(top), image_size=8)
    _assert_colours_follow_labels(small, [CLASS_COLOURS[i] for i in (0, 1, 2, 3, 0)])


def test_mini_imagenet_incomplete(tmp_path: Path) -> None:
    top = _write_mini_imagenet(tmp_path / "a")
    (top / "val.csv").unlink()
    _assert_refused("mini_imagenet", top, "lacks val.csv", "train.csv, val.csv and test.csv")

    top = _write_mini_imagenet(tmp_path / "b")
    with open(top / "test.csv", "a") as handle:
        handle.write("n0100000000.jpg,n01\n")
    _assert_refused("mini_imagenet", top, "class n01 is in both train.csv and test.csv")

    top = _write_mini_imagenet(tmp_path / "c")
    (top / "images" / "n0400000001.jpg").unlink()
    _assert_refused("mini_imagenet", top, "test.csv", "n0400000001.jpg")


# ---------------------------------------------------------------------------------------------
# Generic folders above the in-memory budget are file-backed


@pytest.mark.parametrize("packed", [False, True])
def test_large_folder_is_file_backed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packed: bool
) -> None:
    import zipfile

    top = tmp_path / "photos"
    for c, name in enumerate(["b_class", "a_class", "c_class"]):
        for i in range(2):
            _jpeg(top / name / f"{i}.jpg", CLASS_COLOURS[c])
    root = top
    if packed:
        root = tmp_path / "photos.zip"
        with zipfile.ZipFile(root, "w") as archive:
            for path in sorted(top.rglob("*.jpg")):
                archive.write(path, path.relative_to(tmp_path).as_posix())
    in_memory = load_dataset("folder", root=str(root), image_size=8)
    assert isinstance(in_memory.images, ImageSet)
    monkeypatch.setattr(_folder, "MEMORY_BUDGET", 0)
    lazy = load_dataset("folder", root=str(root), image_size=8)
    assert isinstance(lazy.images, FileImageSet) and lazy.images.archive == packed
    assert lazy.images.class_names == in_memory.images.class_names == (
        "a_class", "b_class", "c_class")
    assert np.array_equal(lazy.images.labels, in_memory.images.labels)
    assert lazy.train_classes.tolist() == [0] and lazy.test_classes.tolist() == [1, 2]
    _assert_colours_follow_labels(lazy, [CLASS_COLOURS[1], CLASS_COLOURS[0], CLASS_COLOURS[2]])
