"""Datasets read from files: Omniglot (real sample, generated trees), generic folders, errors."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from PIL import ImageDraw

from dmlsearch.trainables.data import Dataset
from dmlsearch.trainables.data import load_dataset
from tests.trainables._data_helpers import user_error as _user_error

#: The real Omniglot sample beside the repository (``<repo>/../shared/data``), never committed.
OMNIGLOT_ZIP = (
    Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
    / "omniglot_background_small1.zip"
)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def omniglot_zip() -> Path:
    if not OMNIGLOT_ZIP.is_file():
        pytest.skip(f"the Omniglot sample is not at {OMNIGLOT_ZIP.resolve()}")
    return OMNIGLOT_ZIP


def _stroke_image(rng: np.random.Generator, size: int = 105) -> Image.Image:
    """An Omniglot-like drawing: black strokes on white, 1-bit."""
    image = Image.new("1", (size, size), 1)
    points = [tuple(int(v) for v in rng.integers(10, size - 10, 2)) for _ in range(4)]
    ImageDraw.Draw(image).line(points, fill=0, width=3)
    return image


def _write_omniglot_tree(top: Path, *, alphabets: int = 2, characters: int = 2) -> None:
    rng = np.random.default_rng(0)
    for a in range(alphabets):
        for c in range(characters):
            folder = top / f"Alphabet{a}" / f"character{c + 1:02d}"
            folder.mkdir(parents=True)
            for i in range(3):
                _stroke_image(rng).save(folder / f"{a}{c}_{i:02d}.png")


def _zip_tree(top: Path, archive: Path, *, prefix: str = "") -> Path:
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(top.rglob("*")):
            zipped.write(path, prefix + path.relative_to(top).as_posix())
    return archive


def _assert_same(a: Dataset, b: Dataset) -> None:
    assert torch.equal(a.images.images, b.images.images)
    assert np.array_equal(a.images.labels, b.images.labels)
    assert a.images.class_names == b.images.class_names


# ---------------------------------------------------------------------------------------------
# Omniglot: the real sample


def test_omniglot_sample_from_zip_and_extracted(omniglot_zip: Path, tmp_path: Path) -> None:
    from_zip = load_dataset("omniglot", root=str(omniglot_zip))
    images = from_zip.images
    assert images.num_classes == 136 and len(images) == 136 * 20
    assert np.bincount(images.labels).tolist() == [20] * 136
    assert tuple(images.images.shape) == (2720, 1, 32, 32) and images.images.dtype == torch.uint8
    assert images.class_names[0] == "Balinese/character01"
    assert list(images.class_names) == sorted(images.class_names)
    assert len(from_zip.train_classes) == 68 and len(from_zip.test_classes) == 68
    assert np.intersect1d(from_zip.train_classes, from_zip.test_classes).size == 0
    # inverted: a dark background with bright strokes
    assert images.images[:, :, 0, :].float().mean() < 5 and images.images.float().mean() < 60
    assert (images.images.amax(dim=(1, 2, 3)) > 100).all()

    with zipfile.ZipFile(omniglot_zip) as archive:
        archive.extractall(tmp_path / "unzipped")
    wrapper = tmp_path / "unzipped"  # holds exactly one folder, images_background_small1/
    _assert_same(from_zip, load_dataset("omniglot", root=str(wrapper)))
    alphabets = wrapper / "images_background_small1"
    _assert_same(from_zip, load_dataset("omniglot", root=str(alphabets)))


def test_omniglot_other_image_size(omniglot_zip: Path) -> None:
    dataset = load_dataset("omniglot", root=str(omniglot_zip), image_size=28)
    assert tuple(dataset.images.images.shape) == (2720, 1, 28, 28)


# ---------------------------------------------------------------------------------------------
# Omniglot: generated trees in every accepted form


def test_omniglot_accepts_folder_wrapper_and_zips(tmp_path: Path) -> None:
    top = tmp_path / "tree" / "images_background"
    _write_omniglot_tree(top)
    (top / "README.txt").write_text("not an image: ignored")
    (top / ".DS_Store").write_bytes(b"ignored")
    direct = load_dataset("omniglot", root=str(top), image_size=16)
    assert direct.images.class_names == (
        "Alphabet0/character01", "Alphabet0/character02",
        "Alphabet1/character01", "Alphabet1/character02",
    )
    assert len(direct.images) == 12 and direct.train_classes.tolist() == [0, 1]
    flat_zip = _zip_tree(top, tmp_path / "flat.zip")
    wrapped_zip = _zip_tree(top, tmp_path / "wrapped.zip", prefix="images_background/")
    for root in (top.parent, flat_zip, wrapped_zip):
        _assert_same(direct, load_dataset("omniglot", root=str(root), image_size=16))


def test_omniglot_pixels_are_resized_and_inverted(tmp_path: Path) -> None:
    top = tmp_path / "alphabets"
    _write_omniglot_tree(top, alphabets=1)
    name = sorted((top / "Alphabet0" / "character01").iterdir())[0]
    original = Image.open(name).convert("L").resize((16, 16), Image.Resampling.BILINEAR)
    dataset = load_dataset("omniglot", root=str(top), image_size=16)
    assert np.array_equal(dataset.images.images[0, 0].numpy(), 255 - np.asarray(original))


# ---------------------------------------------------------------------------------------------
# Generic class-per-folder trees


def _write_folder_tree(top: Path) -> None:
    """Three classes of RGB images: PNG, JPEG, grayscale and RGBA, of different shapes."""
    (top / "zebra").mkdir(parents=True)
    (top / "apple").mkdir()
    (top / "mango").mkdir()
    wide = Image.new("RGB", (60, 30), (255, 0, 0))
    wide.paste((0, 0, 255), (0, 0, 10, 30))  # blue sixths left and right: cropped away
    wide.paste((0, 0, 255), (50, 0, 60, 30))
    wide.save(top / "apple" / "wide.png")
    Image.new("RGB", (20, 40), (0, 200, 0)).save(top / "apple" / "tall.jpg", quality=95)
    Image.new("L", (16, 16), 77).save(top / "mango" / "gray.png")
    Image.new("RGBA", (50, 50), (10, 20, 30, 255)).save(top / "mango" / "alpha.png")
    Image.new("RGB", (33, 17), (250, 250, 0)).save(top / "zebra" / "a.jpeg")
    Image.new("RGB", (16, 16), (0, 0, 0)).save(top / "zebra" / "b.bmp")
    Image.new("RGB", (16, 16), (9, 9, 9)).save(top / "zebra" / "c.webp", lossless=True)
    (top / "zebra" / "notes.txt").write_text("ignored")


def test_folder_tree(tmp_path: Path) -> None:
    top = tmp_path / "photos"
    _write_folder_tree(top)
    dataset = load_dataset("folder", root=str(top), image_size=16)
    images = dataset.images
    assert images.class_names == ("apple", "mango", "zebra")
    assert images.labels.tolist() == [0, 0, 1, 1, 2, 2, 2]
    assert tuple(images.images.shape) == (7, 3, 16, 16) and images.channels == 3
    tall, wide = images.images[0], images.images[1]  # sorted by file name in each class
    assert (tall[1] > 150).all() and (tall[0] < 60).all()  # green
    assert (wide[0] == 255).all() and (wide[2] == 0).all()  # the centre crop is all red
    assert images.images[2].tolist() == [[[10] * 16] * 16, [[20] * 16] * 16, [[30] * 16] * 16]
    assert (images.images[3] == 77).all()  # grayscale to RGB
    assert dataset.train_classes.tolist() == [0] and dataset.test_classes.tolist() == [1, 2]
    _assert_same(dataset, load_dataset("folder", root=str(_zip_tree(top, tmp_path / "p.zip")),
                                       image_size=16))


# ---------------------------------------------------------------------------------------------
# Errors: one line, saying what was expected and what was found




@pytest.mark.parametrize("name", ["omniglot", "folder"])
def test_missing_root(tmp_path: Path, name: str) -> None:
    message = _user_error(name, tmp_path / "nowhere")
    assert "does not exist" in message and str(tmp_path / "nowhere") in message
    assert "--data-root DIR" in message
    assert ("<alphabet>/<character>/*.png" if name == "omniglot" else "<class>/*.") in message


def test_omniglot_wrong_layouts(tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    for i in range(3):
        _stroke_image(np.random.default_rng(i)).save(flat / f"{i}.png")
    message = _user_error("omniglot", flat)
    assert "<alphabet>/<character>/*.png" in message and "3 image files at depth 1" in message

    two = tmp_path / "two"
    _write_omniglot_tree(two / "images_background")
    _write_omniglot_tree(two / "images_evaluation")
    message = _user_error("omniglot", two)
    assert "images_background, images_evaluation" in message and "pass one of" in message

    empty = tmp_path / "empty"
    (empty / "Alphabet" / "character01").mkdir(parents=True)
    assert "no image files" in _user_error("omniglot", empty)

    one = tmp_path / "one"
    _write_omniglot_tree(one, alphabets=1, characters=1)
    assert "only 1 class" in _user_error("omniglot", one)

    not_zip = tmp_path / "data.zip"
    not_zip.write_bytes(b"this is no archive")
    assert "not a .zip" in _user_error("omniglot", not_zip)


def test_folder_wrong_layout(tmp_path: Path) -> None:
    top = tmp_path / "deep"
    _write_folder_tree(top / "a" / "b")
    _write_folder_tree(top / "c" / "d")
    message = _user_error("folder", top)
    assert "<class>/*.{png,jpg,jpeg,bmp,webp}" in message and "depth 4" in message


@pytest.mark.parametrize("packed", [False, True])
def test_corrupt_image_names_the_file(tmp_path: Path, packed: bool) -> None:
    top = tmp_path / "alphabets"
    _write_omniglot_tree(top)
    bad = top / "Alphabet1" / "character02" / "11_01.png"
    bad.write_bytes(bad.read_bytes()[:40])  # truncated PNG
    root = _zip_tree(top, tmp_path / "a.zip") if packed else top
    message = _user_error("omniglot", root)
    assert "cannot read image" in message and "Alphabet1/character02/11_01.png" in message


def test_corrupt_folder_image_names_the_file(tmp_path: Path) -> None:
    top = tmp_path / "photos"
    _write_folder_tree(top)
    (top / "mango" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    message = _user_error("folder", top)
    assert "cannot read image" in message and "broken.jpg" in message
