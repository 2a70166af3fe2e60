"""The per-image transforms of file-backed sets: decoded PIL image → uint8 ``[C, size, size]``.

The conventions of the sources' code (Proxy-Anchor, MS loss, the thesis, MemVir): training takes
a ``RandomResizedCrop(size)`` (scale 0.08–1, ratio 3/4–4/3) and a horizontal flip; evaluation takes
``Resize(resize)`` (shorter side) + ``CenterCrop(size)``, deterministic. Where the training crops
are cut from is ``train_crops``: ``original``, the decoded image at full size (Proxy-Anchor's,
the thesis's and MemVir's ``RandomResizedCrop`` of the loaded photo), or ``resized``, the image
after the evaluation resize (the MS loss code's ``Resize(256)`` before its crop);
:func:`train_source` is that image, for both paths (decoded files and the decoded store).
With ``size`` 224 the resize is 256; other sizes keep that ratio (:func:`eval_resize`). Geometry
is done by torchvision's functional ops on PIL images (antialiased bilinear), so the eval output
is the same as ``Compose([Resize(resize), CenterCrop(size), PILToTensor()])``. Random draws
come from a NumPy generator the caller owns (see :mod:`trainables.data._batches` for how it is
seeded), never from a global RNG. Normalisation is not done here: it is the model's input
convention (``trainables.models.input_transform``).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from dmlsearch.trainables.errors import UserError

__all__ = ["TRAIN_CROPS", "TRAIN_MODES", "TransformSpec", "apply_transform", "eval_resize",
           "rrc_box", "train_source"]

#: ``rrc``: RandomResizedCrop(size) + flip; ``resize_crop``: Resize(resize) + RandomCrop(size) +
#: flip; ``none``: the evaluation transform (no augmentation).
TRAIN_MODES = ("rrc", "resize_crop", "none")
#: Where ``rrc`` training crops are cut from: ``original``, the decoded image at full size;
#: ``resized``, the image resized to the evaluation short side ``resize`` (256 for 224 crops).
TRAIN_CROPS = ("original", "resized")

_RRC_SCALE = (0.08, 1.0)
_RRC_LOG_RATIO = (math.log(3 / 4), math.log(4 / 3))


def eval_resize(size: int) -> int:
    """The evaluation resize of crop ``size``: ``round(size · 256 / 224)`` (224 → 256, 32 → 37)."""
    return max(int(size), round(size * 256 / 224))


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class TransformSpec:
    """How a file-backed set turns one decoded image into a uint8 ``[channels, size, size]`` crop.

    Attributes:
        size: side of the square output (the crop), e.g. 224.
        resize: shorter side after the evaluation resize (and in ``resize_crop`` training), ≥ size.
        train_mode: one of :data:`TRAIN_MODES`.
        channels: 3 (RGB) or 1 (grey).
        train_crops: one of :data:`TRAIN_CROPS`: the image ``rrc`` crops are cut from (the other
            modes crop the resized image).
    """

    size: int = 224
    resize: int = 256
    train_mode: str = "rrc"
    channels: int = 3
    train_crops: str = "original"

    def __post_init__(self) -> None:
        if not _is_int(self.size) or self.size < 1:
            raise UserError(f"transform size must be a positive integer, got {self.size!r}")
        if not _is_int(self.resize) or self.resize < self.size:
            raise UserError(
                f"transform resize must be an integer >= size {self.size}, got {self.resize!r}"
            )
        if self.train_mode not in TRAIN_MODES:
            raise UserError(
                f"transform train_mode must be one of {', '.join(TRAIN_MODES)}, got "
                f"{self.train_mode!r}"
            )
        if self.channels not in (1, 3):
            raise UserError(f"transform channels must be 1 or 3, got {self.channels!r}")
        if self.train_crops not in TRAIN_CROPS:
            raise UserError(f"train_crops must be one of {', '.join(TRAIN_CROPS)}, got "
                            f"{self.train_crops!r}")

    @classmethod
    def for_size(cls, size: int, *, train_mode: str = "rrc", channels: int = 3,
                 train_crops: str = "original") -> TransformSpec:
        """The standard transform with crop ``size`` and resize :func:`eval_resize` (size)."""
        return cls(size=size, resize=eval_resize(size), train_mode=train_mode, channels=channels,
                   train_crops=train_crops)

    @property
    def crops_from_original(self) -> bool:
        """Whether training crops are cut from the full-size image (``rrc`` + ``original``)."""
        return self.train_mode == "rrc" and self.train_crops == "original"

    @property
    def mode(self) -> str:
        """The PIL mode images are converted to: ``"RGB"`` or ``"L"``."""
        return "RGB" if self.channels == 3 else "L"


def rrc_box(width: int, height: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """``(top, left, height, width)`` of a RandomResizedCrop box, as torchvision draws it."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(*_RRC_SCALE)
        aspect = math.exp(rng.uniform(*_RRC_LOG_RATIO))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    ratio = width / height  # fallback: the central crop of the nearest allowed aspect
    if ratio < 3 / 4:
        w, h = width, int(round(width / (3 / 4)))
    elif ratio > 4 / 3:
        w, h = int(round(height * (4 / 3))), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def _to_uint8(image: Image.Image) -> torch.Tensor:
    # NumPy's single-threaded transpose: torch's parallel copy of a permuted view costs several
    # times the decode on a busy machine (thread hand-offs for a few hundred KB).
    pixels = np.asarray(image, dtype=np.uint8)
    if pixels.ndim == 2:
        return torch.from_numpy(pixels.copy()).unsqueeze(0)
    return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))


def _functional() -> Any:
    """torchvision's functional ops, imported when an image is first transformed: importing
    torchvision takes seconds (it loads torch's compiler), which a process that reads only a
    decoded store or audio (every trial of a search on one) need not spend."""
    import torchvision.transforms.functional as F

    return F


def train_source(image: Image.Image, spec: TransformSpec) -> Image.Image:
    """The image ``spec``'s training crops are cut from: ``image`` itself when
    :attr:`TransformSpec.crops_from_original`, else ``image`` resized to ``spec.resize``."""
    return image if spec.crops_from_original else _functional().resize(image, spec.resize)


def apply_transform(
    image: Image.Image, spec: TransformSpec, *, train: bool, rng: np.random.Generator | None
) -> torch.Tensor:
    """uint8 ``[C, size, size]`` of ``image`` (already in ``spec.mode``) under ``spec``.

    ``train`` selects ``spec.train_mode``; ``rng`` is needed for the random modes only.
    """
    F = _functional()
    size = spec.size
    if not train or spec.train_mode == "none":
        return _to_uint8(F.center_crop(F.resize(image, spec.resize), [size, size]))
    assert rng is not None, "a training transform needs a random generator"
    image = train_source(image, spec)
    if spec.train_mode == "rrc":
        top, left, h, w = rrc_box(image.width, image.height, rng)
        image = F.resized_crop(image, top, left, h, w, [size, size])
    else:  # resize_crop
        top = int(rng.integers(0, image.height - size + 1))
        left = int(rng.integers(0, image.width - size + 1))
        image = F.crop(image, top, left, size, size)
    if rng.random() < 0.5:
        image = F.hflip(image)
    return _to_uint8(image)
