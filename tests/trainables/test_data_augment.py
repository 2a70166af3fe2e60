"""Batched augmentation (:mod:`trainables.data._augment`) against the per-image transforms it
replaces: the same RandomResizedCrop box distribution as ``rrc_box`` (torchvision's), crops
resampled as torchvision's ``resized_crop`` does, flips and centre crops as before."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F2
from scipy import stats

from dmlsearch.trainables.data import _augment as aug
from dmlsearch.trainables.data._transforms import rrc_box

N = 4000


def _features(boxes: np.ndarray, height: int, width: int) -> dict[str, np.ndarray]:
    top, left, h, w = (boxes[:, i].astype(float) for i in range(4))
    return {"scale": h * w / (height * width), "log_ratio": np.log(w / h),
            "centre_y": (top + h / 2) / height, "centre_x": (left + w / 2) / width}


@pytest.mark.parametrize(("height", "width"), [(256, 341), (341, 256), (256, 256), (40, 400)])
def test_rrc_boxes_are_drawn_from_torchvisions_distribution(height: int, width: int) -> None:
    # (40, 400): most tries do not fit, so the central-crop fallback is drawn often
    rng = np.random.default_rng(0)
    one_by_one = np.array([rrc_box(width, height, rng) for _ in range(N)])
    batched = aug.rrc_boxes(np.full(N, height), np.full(N, width), np.random.default_rng(1))
    assert batched.dtype == np.int64 and batched.shape == (N, 4)
    assert (batched[:, 0] >= 0).all() and (batched[:, 0] + batched[:, 2] <= height).all()
    assert (batched[:, 1] >= 0).all() and (batched[:, 1] + batched[:, 3] <= width).all()
    a, b = _features(one_by_one, height, width), _features(batched, height, width)
    for name in a:  # two-sample Kolmogorov-Smirnov: the same distribution
        assert stats.ks_2samp(a[name], b[name]).pvalue > 1e-3, name
    fallback = np.asarray(rrc_box(width, height, _NeverFits()))  # the central crop

    def share(boxes: np.ndarray) -> float:
        return float(np.mean((boxes == fallback).all(axis=1)))

    assert abs(share(one_by_one) - share(batched)) < 0.03


class _NeverFits:
    """A generator whose draws never give a box that fits (for ``rrc_box``'s fallback)."""

    def uniform(self, low: float, high: float) -> float:
        return high * 1e6 if low > 0 else high

    def integers(self, low: int, high: int) -> int:  # pragma: no cover - not reached
        raise AssertionError


def test_random_and_centre_crops() -> None:
    heights, widths = np.array([256, 300, 224]), np.array([341, 256, 224])
    centre = aug.center_boxes(heights, widths, 224)
    for (top, left, h, w), height, width in zip(centre, heights, widths):
        assert (h, w) == (224, 224)
        assert top == int(round((height - 224) / 2.0)) and left == int(round((width - 224) / 2.0))
    boxes = aug.random_crop_boxes(np.full(N, 256), np.full(N, 300), 224,
                                  np.random.default_rng(0))
    assert set(boxes[:, 0]) == set(range(33)) and set(boxes[:, 1]) == set(range(77))


def _cut(images: list[np.ndarray], boxes: np.ndarray, exact: bool = False) -> torch.Tensor:
    height, width = aug.padded_shape(boxes, exact=exact)
    out = np.zeros((len(images), height, width, 3), dtype=np.uint8)
    aug.cut_crops(images, boxes, out, exact=exact)
    return torch.from_numpy(out)


def _photos(count: int, seed: int = 0) -> list[np.ndarray]:
    """Smooth, photo-like images (random ones would make any resampler look bad)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        h, w = int(rng.integers(200, 300)), int(rng.integers(200, 360))
        y, x = np.mgrid[0:h, 0:w] / 40.0
        channels = [np.sin(x * rng.uniform(0.5, 2) + rng.uniform(0, 6)) *
                    np.cos(y * rng.uniform(0.5, 2)) for _ in range(3)]
        out.append(((np.stack(channels, -1) + 1) * 127.5).astype(np.uint8))
    return out


def _torchvision(images: list[np.ndarray], boxes: np.ndarray, size: int) -> torch.Tensor:
    return torch.stack([
        F2.resized_crop(torch.from_numpy(img).permute(2, 0, 1), int(t), int(left), int(h),
                        int(w), [size, size], antialias=True)
        for img, (t, left, h, w) in zip(images, boxes)])


def test_interpolate_is_torchvisions_resized_crop_exactly() -> None:
    images = _photos(12)
    boxes = aug.rrc_boxes(np.array([i.shape[0] for i in images]),
                          np.array([i.shape[1] for i in images]), np.random.default_rng(2))
    got = aug.resize_crops(_cut(images, boxes), boxes[:, 2:], 96, None, method="interpolate")
    assert torch.equal(got, _torchvision(images, boxes, 96))


def test_roi_align_is_close_to_torchvisions_resized_crop() -> None:
    # the GPU's kernel (run here on the CPU): area-averaged bilinear samples instead of
    # torchvision's antialiasing filter; near the same pixels, never off by much
    images = _photos(12, seed=1)
    boxes = aug.rrc_boxes(np.array([i.shape[0] for i in images]),
                          np.array([i.shape[1] for i in images]), np.random.default_rng(3))
    got = aug.resize_crops(_cut(images, boxes), boxes[:, 2:], 96, None, method="roi_align")
    want = _torchvision(images, boxes, 96)
    diff = (got.float() - want.float()).abs()
    assert got.dtype == torch.uint8 and got.shape == want.shape
    assert diff.mean() < 1.5 and diff.quantile(0.99) < 8


def test_edges_repeat_the_crops_own_pixels() -> None:
    # a crop of a bright region inside a dark image: no dark pixel may bleed in at its edges
    image = np.zeros((100, 100, 3), dtype=np.uint8)
    image[20:60, 30:70] = 200
    boxes = np.array([[20, 30, 40, 40]])
    for method in aug.METHODS:
        got = aug.resize_crops(_cut([image], boxes), boxes[:, 2:], 64, None, method=method)
        assert int(got.min()) == 200, method


def test_flips_mirror_the_chosen_crops_only() -> None:
    images = _photos(4, seed=5)
    boxes = aug.center_boxes(np.array([i.shape[0] for i in images]),
                             np.array([i.shape[1] for i in images]), 64)
    crops = _cut(images, boxes, exact=True)
    plain = aug.resize_crops(crops, boxes[:, 2:], 64, None)
    flips = torch.tensor([True, False, True, False])
    flipped = aug.resize_crops(crops, boxes[:, 2:], 64, flips)
    for i in range(4):
        want = plain[i].flip(-1) if flips[i] else plain[i]
        assert torch.equal(flipped[i], want)
    # exact crops are the pixels themselves (no resampling)
    top, left = boxes[0, :2]
    assert torch.equal(plain[0], torch.from_numpy(images[0][top:top + 64, left:left + 64])
                       .permute(2, 0, 1))


def test_an_unknown_method_is_refused() -> None:
    images = _photos(1)
    boxes = np.array([[0, 0, 50, 60]])
    with pytest.raises(ValueError, match="roi_align, interpolate"):
        aug.resize_crops(_cut(images, boxes), boxes[:, 2:], 32, None, method="nearest")


def test_rrc_box_ratios_cover_the_allowed_range() -> None:
    boxes = aug.rrc_boxes(np.full(N, 1000), np.full(N, 1000), np.random.default_rng(0))
    ratios = np.log(boxes[:, 3] / boxes[:, 2])
    assert ratios.min() >= math.log(3 / 4) - 0.02 and ratios.max() <= math.log(4 / 3) + 0.02
