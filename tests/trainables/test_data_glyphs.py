"""The built-in ``glyphs`` dataset: size, determinism, cache, and that its classes are distinct;
``glyphs_b``, its second set of characters: none of glyphs', as distinct and as learnable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dmlsearch.trainables.data import Dataset
from dmlsearch.trainables.data import _glyphs
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.data._glyph_fonts import GLYPH_CHARS
from dmlsearch.trainables.data._glyph_fonts import GLYPH_CHARS_B
from dmlsearch.trainables.data._glyph_fonts import Face
from dmlsearch.trainables.data._glyph_fonts import all_faces
from dmlsearch.trainables.data._glyph_fonts import faces_for
from dmlsearch.trainables.data._glyphs import build_glyph_images
from dmlsearch.trainables.data._glyphs import glyph_cache_path
from dmlsearch.trainables.data._glyphs import render_clean

#: Two characters whose upright, centred renderings in one font differ less than this (RMS of
#: the L2-normalised 32 × 32 images) count as the same shape. Measured: chosen characters ≥ 0.21
#: (closest H / Π in serif bold); homoglyphs A / Α = 0.0, l / I = 0.14.
SAME_SHAPE = 0.15


@pytest.fixture(scope="module")
def glyphs(module_cache: Path) -> Dataset:
    return load_dataset("glyphs")


@pytest.fixture()
def few_per_class(monkeypatch: pytest.MonkeyPatch) -> int:
    """Build glyph sets with 2 images per class, to test caching and options quickly."""
    monkeypatch.setattr(_glyphs, "IMAGES_PER_CLASS", 2)
    return 2


def test_counts_shape_and_names(glyphs: Dataset) -> None:
    images = glyphs.images
    assert glyphs.name == "glyphs"
    assert images.num_classes == len(GLYPH_CHARS) >= 100
    counts = np.bincount(images.labels, minlength=images.num_classes)
    assert counts.min() >= 20 and len(images) == counts.sum()
    assert images.images.dtype == torch.uint8 and images.images.is_contiguous()
    assert tuple(images.images.shape) == (len(images), 1, 32, 32)
    assert images.channels == 1 and images.image_size == 32
    assert images.class_names[list(GLYPH_CHARS).index("Ω")] == "U+03A9 Ω"
    assert list(images.class_names) == sorted(images.class_names), "class ids follow names"
    # white strokes on black: dark borders, some bright ink in every image
    assert images.images[:, :, 0, :].float().mean() < 10
    assert (images.images.amax(dim=(1, 2, 3)) > 120).all()


def test_image_size_is_honoured(module_cache: Path, few_per_class: int) -> None:
    dataset = load_dataset("glyphs", image_size=20, seed=3)
    assert tuple(dataset.images.images.shape) == (len(GLYPH_CHARS) * few_per_class, 1, 20, 20)


def test_same_seed_same_bits(glyphs: Dataset) -> None:
    again = build_glyph_images(image_size=32, seed=0)  # fresh, not from the cache
    assert torch.equal(again.images, glyphs.images.images)
    assert np.array_equal(again.labels, glyphs.images.labels)


def test_each_class_has_its_own_random_stream(glyphs: Dataset, few_per_class: int) -> None:
    """Fewer images per class give the first images of the full set; another seed, others."""
    first = glyphs.images.images.reshape(len(GLYPH_CHARS), -1, 1, 32, 32)[:, :few_per_class]
    assert torch.equal(build_glyph_images(image_size=32, seed=0).images, first.flatten(0, 1))
    other = build_glyph_images(image_size=32, seed=1).images
    differs = (other != first.flatten(0, 1)).flatten(1).any(dim=1)
    assert differs.float().mean() > 0.99


def test_no_two_images_of_a_class_are_equal(glyphs: Dataset) -> None:
    flat = glyphs.images.images.flatten(1).numpy()
    assert len(np.unique(flat, axis=0)) == len(flat)


def test_second_load_reads_the_cache(
    glyphs: Dataset, module_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = Path(glyph_cache_path(image_size=32, seed=0))
    assert path.parent == module_cache and path.is_file()
    assert "v1" in path.name and "32px" in path.name and "seed0" in path.name
    assert not list(module_cache.glob("*.tmp")), "the temporary file was moved into place"

    def no_build(**kwargs: object) -> None:
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(_glyphs, "build_glyph_images", no_build)
    cached = load_dataset("glyphs")
    assert torch.equal(cached.images.images, glyphs.images.images)
    assert cached.images.class_names == glyphs.images.class_names


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_cache_is_rebuilt(
    module_cache: Path, few_per_class: int, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = load_dataset("glyphs", image_size=24, seed=5)
    path = Path(glyph_cache_path(image_size=24, seed=5))
    good = path.read_bytes()
    bad = {"garbage": b"not a zip file at all", "truncated": good[: len(good) // 2], "empty": b""}
    path.write_bytes(bad[damage])
    rebuilt = load_dataset("glyphs", image_size=24, seed=5)
    assert torch.equal(rebuilt.images.images, first.images.images)
    assert "rebuilding" in caplog.text
    assert path.read_bytes() != bad[damage], "the bad file was replaced"
    again = load_dataset("glyphs", image_size=24, seed=5)
    assert torch.equal(again.images.images, first.images.images)


def test_stale_cache_is_rebuilt(
    module_cache: Path, few_per_class: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_glyphs, "_fingerprint", lambda chars: "another-version")
    calls: list[int] = []
    real_build = _glyphs.build_glyph_images

    def counting_build(**kwargs: int) -> object:
        calls.append(1)
        return real_build(**kwargs)

    monkeypatch.setattr(_glyphs, "build_glyph_images", counting_build)
    load_dataset("glyphs", image_size=16)
    load_dataset("glyphs", image_size=16)
    assert len(calls) == 1
    monkeypatch.setattr(_glyphs, "_fingerprint", lambda chars: "yet-another-version")
    load_dataset("glyphs", image_size=16)
    assert len(calls) == 2


def test_standard_split(glyphs: Dataset) -> None:
    train, test = glyphs.train_classes, glyphs.test_classes
    assert np.intersect1d(train, test).size == 0
    assert np.array_equal(np.union1d(train, test), np.arange(glyphs.images.num_classes))
    assert np.array_equal(train, np.arange(glyphs.images.num_classes // 2))
    assert np.array_equal(glyphs.train().classes(), train)
    assert np.array_equal(glyphs.test().classes(), test)
    assert len(glyphs.train()) + len(glyphs.test()) == len(glyphs.images)


def _clean(char: str, face: Face) -> np.ndarray:
    image = render_clean(char, face=face, image_size=32).astype(np.float64).ravel()
    return image / max(np.linalg.norm(image), 1e-9)


def _closest_in_any_font(chars: str | tuple[str, ...]) -> tuple[float, str, str, str]:
    """Smallest distance between upright renderings of two of ``chars`` in one font."""
    best = (np.inf, "", "", "")
    for face in all_faces():
        present = [c for c in chars if ord(c) in face.codepoints]
        flat = np.stack([_clean(c, face) for c in present])
        distance = np.linalg.norm(flat[:, None] - flat[None], axis=-1)
        np.fill_diagonal(distance, np.inf)
        i, j = np.unravel_index(distance.argmin(), distance.shape)
        if distance[i, j] < best[0]:
            best = (float(distance[i, j]), present[i], present[j], face.name)
    return best


def test_the_shape_check_catches_homoglyphs() -> None:
    for pair in ("AΑ", "OО", "lI", "BВ"):
        assert _closest_in_any_font(pair)[0] < SAME_SHAPE, pair


CHAR_SETS = pytest.mark.parametrize("chars", [GLYPH_CHARS, GLYPH_CHARS_B], ids=["glyphs",
                                                                                "glyphs_b"])


@CHAR_SETS
def test_classes_are_not_visual_duplicates(chars: tuple[str, ...]) -> None:
    distance, a, b, face = _closest_in_any_font(chars)
    assert distance >= SAME_SHAPE, f"{a!r} and {b!r} look alike in {face} ({distance:.3f})"


@CHAR_SETS
def test_no_class_is_drawn_as_the_missing_glyph_box(chars: tuple[str, ...]) -> None:
    for face in all_faces():
        box = _clean("\ue000", face)  # a private-use code point no font here maps: .notdef
        for char in (c for c in chars if face in faces_for(c)):
            assert np.linalg.norm(_clean(char, face) - box) > SAME_SHAPE, (char, face.name)


def test_glyphs_b_is_another_set_of_as_many_classes_in_its_own_cache(
        glyphs: Dataset, module_cache: Path) -> None:
    other = load_dataset("glyphs_b")
    assert not set(GLYPH_CHARS) & set(GLYPH_CHARS_B)
    assert list(GLYPH_CHARS_B) == sorted(GLYPH_CHARS_B)  # class ids in code-point order
    assert other.name == "glyphs_b" and other.images.num_classes == glyphs.images.num_classes
    assert other.images.images.shape == glyphs.images.images.shape
    assert other.images.class_names[0] == "U+0431 б"
    assert Path(glyph_cache_path(image_size=32, seed=0, name="glyphs_b")).is_file()
    assert glyph_cache_path(image_size=32, seed=0) != glyph_cache_path(
        image_size=32, seed=0, name="glyphs_b")


@pytest.mark.parametrize("name", ["glyphs", "glyphs_b"])
def test_classes_are_learnable_but_not_trivial(name: str, module_cache: Path) -> None:
    """Nearest class mean on raw pixels, one half of each class against the other half."""
    glyphs = load_dataset(name)
    k = glyphs.images.num_classes
    pixels = glyphs.images.images.flatten(1).numpy().astype(np.float32) / 255
    per_class = pixels.reshape(k, -1, pixels.shape[1])
    means = per_class[:, 0::2].mean(axis=1)
    queries = per_class[:, 1::2].reshape(-1, pixels.shape[1])
    truth = np.repeat(np.arange(k), per_class.shape[1] // 2)
    nearest = ((queries[:, None] - means[None]) ** 2).sum(-1).argmin(1)
    accuracy = (nearest == truth).mean()
    assert 0.3 < accuracy < 0.95, f"nearest-mean accuracy {accuracy:.2f}, chance {1 / k:.3f}"
