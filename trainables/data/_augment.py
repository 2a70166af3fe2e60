"""Augmentation of whole batches on the compute device, from images decoded once.

The per-image PIL transforms (:mod:`trainables.data._transforms`) decode a JPEG, draw a
RandomResizedCrop box, resample it and flip it, one image at a time on the CPU. Here the same
steps are split so that the CPU only *cuts* and the device *resamples*:

1. :func:`rrc_boxes` / :func:`random_crop_boxes` / :func:`center_boxes` draw every box of a
   batch at once (NumPy, vectorised). ``rrc_boxes`` draws from exactly the distribution of
   :func:`~trainables.data._transforms.rrc_box` (torchvision's: up to 10 tries of a scale in
   [0.08, 1] and a log-uniform aspect ratio in [3/4, 4/3], the first box that fits, else the
   central crop of the nearest allowed aspect), and a flip with probability 1/2.
2. :func:`cut_crops` copies each box's pixels (``[h, w, C]`` uint8, HWC as stored) into one
   ``[B, H, W, C]`` buffer padded to the batch's largest box, repeating each crop's last row and
   column once (what resampling at a crop's edge reads: torchvision's resize clamps there too).
3. :func:`resize_crops` resamples every crop to ``size x size``, flips the chosen ones and
   returns uint8 ``[B, C, size, size]``. Crops that are already ``size x size`` (``resize_crop``,
   evaluation) skip the resampling. Two kernels, one per kind of device:

   * on a GPU, one call of :func:`torchvision.ops.roi_align` for the whole batch
     (``aligned=True``: pixel centres as in ``F.interpolate(align_corners=False)``; adaptive
     sampling: ``ceil(h / size) x ceil(w / size)`` bilinear samples averaged per output pixel,
     an area filter when shrinking that stands in for the antialiasing), rounded to uint8: a
     few kernels a batch instead of a few per image;
   * on a CPU, ``F.interpolate(mode="bilinear", antialias=True)`` on each uint8 crop, which is
     exactly torchvision's tensor ``resized_crop`` (its vectorised uint8 path: 0.44 ms a crop,
     against 10.7 ms for ``roi_align`` on one core, measured here).

   Either can be asked for on either device (``method``), which the tests use to compare them.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["METHODS", "center_boxes", "cut_crops", "padded_shape", "random_crop_boxes",
           "resize_crops", "rrc_boxes"]

_SCALE = (0.08, 1.0)
_LOG_RATIO = (math.log(3 / 4), math.log(4 / 3))
_TRIES = 10


def rrc_boxes(heights: np.ndarray, widths: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``[n, 4]`` int64 ``(top, left, h, w)``: one RandomResizedCrop box per image, as
    torchvision draws it (see the module's notes), for images of the given sizes."""
    heights = np.asarray(heights, dtype=np.int64)
    widths = np.asarray(widths, dtype=np.int64)
    n = len(heights)
    area = (heights * widths).astype(np.float64)
    target = area[:, None] * rng.uniform(*_SCALE, size=(n, _TRIES))
    aspect = np.exp(rng.uniform(*_LOG_RATIO, size=(n, _TRIES)))
    w = np.round(np.sqrt(target * aspect)).astype(np.int64)
    h = np.round(np.sqrt(target / aspect)).astype(np.int64)
    fits = (w > 0) & (w <= widths[:, None]) & (h > 0) & (h <= heights[:, None])
    first = fits.argmax(axis=1)
    rows = np.arange(n)
    box_h, box_w = h[rows, first], w[rows, first]
    missed = ~fits.any(axis=1)
    if missed.any():  # the central crop of the nearest allowed aspect ratio
        ratio = widths[missed] / heights[missed]
        fw, fh = widths[missed].copy(), heights[missed].copy()
        tall, wide = ratio < 3 / 4, ratio > 4 / 3
        fh[tall] = np.round(fw[tall] / (3 / 4)).astype(np.int64)
        fw[wide] = np.round(fh[wide] * (4 / 3)).astype(np.int64)
        box_h[missed], box_w[missed] = fh, fw
    top = np.floor(rng.random(n) * (heights - box_h + 1)).astype(np.int64)
    left = np.floor(rng.random(n) * (widths - box_w + 1)).astype(np.int64)
    if missed.any():
        top[missed] = (heights[missed] - box_h[missed]) // 2
        left[missed] = (widths[missed] - box_w[missed]) // 2
    return np.stack([top, left, box_h, box_w], axis=1)


def random_crop_boxes(heights: np.ndarray, widths: np.ndarray, size: int,
                      rng: np.random.Generator) -> np.ndarray:
    """``[n, 4]`` ``(top, left, size, size)``: a uniformly placed ``size`` square per image
    (``RandomCrop(size)`` after the evaluation resize: the ``resize_crop`` training mode)."""
    heights = np.asarray(heights, dtype=np.int64)
    widths = np.asarray(widths, dtype=np.int64)
    n = len(heights)
    top = np.floor(rng.random(n) * (heights - size + 1)).astype(np.int64)
    left = np.floor(rng.random(n) * (widths - size + 1)).astype(np.int64)
    sizes = np.full(n, size, dtype=np.int64)
    return np.stack([top, left, sizes, sizes], axis=1)


def center_boxes(heights: np.ndarray, widths: np.ndarray, size: int) -> np.ndarray:
    """``[n, 4]`` ``(top, left, size, size)``: torchvision's ``CenterCrop(size)`` boxes."""
    heights = np.asarray(heights, dtype=np.int64)
    widths = np.asarray(widths, dtype=np.int64)
    # torchvision: int(round((H - size) / 2.0)), Python's round (half to even), as np.round
    top = np.round((heights - size) / 2.0).astype(np.int64)
    left = np.round((widths - size) / 2.0).astype(np.int64)
    sizes = np.full(len(heights), size, dtype=np.int64)
    return np.stack([top, left, sizes, sizes], axis=1)


def padded_shape(boxes: np.ndarray, *, exact: bool) -> tuple[int, int]:
    """``(H, W)`` of the buffer :func:`cut_crops` fills for ``boxes`` (``exact``: no margin)."""
    margin = 0 if exact else 1
    return int(boxes[:, 2].max()) + margin, int(boxes[:, 3].max()) + margin


def cut_crops(sources: list[np.ndarray], boxes: np.ndarray, out: np.ndarray, *,
              exact: bool) -> None:
    """Copy ``sources[i][top:top+h, left:left+w]`` into ``out[i, :h, :w]`` for every box.

    ``out`` is ``[B, H, W, C]`` uint8 of at least :func:`padded_shape`. Unless ``exact`` (every
    box ``size x size``, nothing resampled), each crop's last row and column are repeated once
    beyond it: the samples :func:`resize_crops` takes at a crop's edge then read its own pixels.
    """
    for i, (source, (top, left, h, w)) in enumerate(zip(sources, boxes.tolist())):
        out[i, :h, :w] = source[top : top + h, left : left + w]
        if not exact:
            out[i, :h, w] = out[i, :h, w - 1]
            out[i, h, : w + 1] = out[i, h - 1, : w + 1]


METHODS = ("roi_align", "interpolate")


def resize_crops(crops: torch.Tensor, sizes: np.ndarray, size: int,
                 flips: torch.Tensor | None, *, method: str | None = None) -> torch.Tensor:
    """uint8 ``[B, C, size, size]`` from the cut crops, on their device.

    Args:
        crops: uint8 ``[B, H, W, C]`` from :func:`cut_crops`.
        sizes: int ``[B, 2]`` (host): ``(h, w)`` of each crop.
        size: the output side.
        flips: bool ``[B]`` on the crops' device: mirror these crops (``None``: none).
        method: ``"roi_align"`` or ``"interpolate"``; ``None``: the first on a GPU, the second
            on a CPU (see the module's notes).
    """
    batch, height, width, _ = crops.shape
    if height == size and width == size and bool((sizes == size).all()):
        out = crops.permute(0, 3, 1, 2)  # already the model's input: a view, HWC strides
        if flips is None:
            return out
        return torch.where(flips.view(-1, 1, 1, 1), out.flip(-1), out)
    if method is None:
        method = "interpolate" if crops.device.type == "cpu" else "roi_align"
    if method == "interpolate":
        on_cpu = crops.device.type == "cpu"  # uint8 antialiased bilinear exists on CPUs only
        out = torch.cat([
            torch.nn.functional.interpolate(
                crop if on_cpu else crop.float(), size=(size, size), mode="bilinear",
                align_corners=False, antialias=True)
            for crop in (crops[i, :h, :w].permute(2, 0, 1)[None]
                         for i, (h, w) in enumerate(sizes.tolist()))])
        if not on_cpu:
            out = out.round_().clamp_(0, 255).to(torch.uint8)
        if flips is None:
            return out
        return torch.where(flips.view(-1, 1, 1, 1), out.flip(-1), out)
    if method != "roi_align":
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    from torchvision.ops import roi_align  # torchvision's C++/CUDA ops: only when resampling

    sizes_t = torch.from_numpy(np.ascontiguousarray(sizes, dtype=np.float32)).to(
        crops.device, non_blocking=True)
    x = crops.permute(0, 3, 1, 2).float()
    boxes = torch.zeros((batch, 5), dtype=torch.float32, device=crops.device)
    boxes[:, 0] = torch.arange(batch, device=crops.device, dtype=torch.float32)
    boxes[:, 3] = sizes_t[:, 1]  # x2 = w
    boxes[:, 4] = sizes_t[:, 0]  # y2 = h
    out = roi_align(x, boxes, output_size=(size, size), spatial_scale=1.0, sampling_ratio=-1,
                    aligned=True)
    if flips is not None:
        out = torch.where(flips.view(-1, 1, 1, 1), out.flip(-1), out)
    return out.round_().clamp_(0, 255).to(torch.uint8)
