"""The built-in ``glyphs`` and ``glyphs_b`` datasets: characters drawn from matplotlib's fonts,
no download (``glyphs_b``: other characters, drawn the same way; :mod:`._glyph_fonts`).

Every image is one character (its class) in a face picked at random among the fonts that have it
(sans, serif, mono; regular, bold, italic), with a random stroke thickening, a random affine
(scale, aspect, rotation, shear, translation), a random blur and stroke brightness: white strokes
on black. Drawing happens on a supersampled canvas that is box-averaged down to ``image_size``, so
small images are antialiased. Same seed → bit-identical images; each class draws from its own
random stream seeded by ``(seed, code point)``. The result is cached as ``.npz`` (see
:mod:`trainables.data._cache`) because building takes seconds and every trial loads it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
import PIL
import torch
from PIL import Image
from PIL import ImageDraw
from PIL import ImageFilter
from PIL import ImageFont

from dmlsearch.trainables.data._cache import cache_dir
from dmlsearch.trainables.data._cache import load_cached
from dmlsearch.trainables.data._cache import save_cached
from dmlsearch.trainables.data._glyph_fonts import GLYPH_CHARS
from dmlsearch.trainables.data._glyph_fonts import GLYPH_CHARS_B
from dmlsearch.trainables.data._glyph_fonts import Face
from dmlsearch.trainables.data._glyph_fonts import class_name
from dmlsearch.trainables.data._glyph_fonts import faces_for
from dmlsearch.trainables.data._glyph_fonts import font_files
from dmlsearch.trainables.data._imageset import Dataset
from dmlsearch.trainables.data._imageset import ImageSet
from dmlsearch.trainables.data._registry import register_dataset

__all__ = [
    "IMAGES_PER_CLASS",
    "Pose",
    "build_glyph_images",
    "glyph_cache_path",
    "render_clean",
    "render_glyph",
]

logger = logging.getLogger(__name__)

#: Bump when anything changes the images (characters, fonts, augmentation, file format).
FORMAT_VERSION = 1
IMAGES_PER_CLASS = 20
#: Canvas side is at least this many pixels before it is averaged down to ``image_size``.
_MIN_CANVAS = 128


@functools.lru_cache(maxsize=64)
def _font(path: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(path, size=size, layout_engine=ImageFont.Layout.BASIC)


def _draw_tight(char: str, face: Face, *, size: int, stroke: int) -> Image.Image:
    """``char`` in white on black, cropped to its ink with a small margin."""
    font = _font(face.path, size)
    left, top, right, bottom = font.getbbox(char, stroke_width=stroke)
    pad = 2 + stroke
    canvas = Image.new("L", (right - left + 2 * pad, bottom - top + 2 * pad), 0)
    ImageDraw.Draw(canvas).text(
        (pad - left, pad - top), char, font=font, fill=255, stroke_width=stroke, stroke_fill=255
    )
    return canvas


@dataclass(frozen=True)
class Pose:
    """Where a glyph lands on the canvas: size, aspect, rotation, shear and shift."""

    fill: float = 0.65  # longer glyph side as a fraction of the canvas
    aspect: float = 1.0  # width / height stretch (its square root each way)
    degrees: float = 0.0  # rotation, counter-clockwise on screen
    shear: float = 0.0  # horizontal shear factor
    shift: tuple[float, float] = (0.0, 0.0)  # centre offset as a fraction of the canvas

    @classmethod
    def random(cls, rng: np.random.Generator) -> Pose:
        return cls(
            fill=rng.uniform(0.55, 0.75),
            aspect=math.exp(rng.uniform(-0.12, 0.12)),
            degrees=rng.uniform(-12.0, 12.0),
            shear=rng.uniform(-0.18, 0.18),
            shift=(rng.uniform(-0.07, 0.07), rng.uniform(-0.07, 0.07)),
        )


def _place(glyph: Image.Image, pose: Pose, *, canvas: int) -> Image.Image:
    """``glyph`` on a black ``canvas`` × ``canvas`` image under ``pose``."""
    width, height = glyph.size
    scale = pose.fill * canvas / max(width, height)
    stretch = math.sqrt(pose.aspect)
    angle = math.radians(pose.degrees)
    cos, sin = math.cos(angle), math.sin(angle)
    # forward map (glyph pixel → canvas pixel, y down): rotation @ shear @ scale
    forward = np.array([[cos, sin], [-sin, cos]]) @ np.array([[1.0, pose.shear], [0.0, 1.0]])
    forward = forward @ np.diag([scale * stretch, scale / stretch])
    inverse = np.linalg.inv(forward)
    centre_in = np.array([width / 2.0, height / 2.0])
    centre_out = (np.array([0.5, 0.5]) + np.array(pose.shift)) * canvas
    offset = centre_in - inverse @ centre_out
    coefficients = (*inverse[0], offset[0], *inverse[1], offset[1])
    return glyph.transform(
        (canvas, canvas), Image.Transform.AFFINE, coefficients, Image.Resampling.BILINEAR, fill=0
    )


def _finish(placed: Image.Image, *, image_size: int, blur: float, brightness: float) -> np.ndarray:
    """Blur (in output pixels), box-average down to ``image_size``, scale the brightness."""
    factor = placed.size[0] // image_size
    if blur > 0.05:
        placed = placed.filter(ImageFilter.GaussianBlur(blur * factor))
    small = placed.resize((image_size, image_size), Image.Resampling.BOX)
    pixels = np.asarray(small, dtype=np.float32) * brightness
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


def _canvas_size(image_size: int) -> int:
    return image_size * max(1, math.ceil(_MIN_CANVAS / image_size))


def render_glyph(
    char: str, *, image_size: int, rng: np.random.Generator, faces: tuple[Face, ...] | None = None
) -> np.ndarray:
    """One random rendering of ``char``: uint8 ``[image_size, image_size]``, strokes bright.

    ``faces`` limits the fonts drawn from (default: every font that has the character).
    """
    faces = faces_for(char) if faces is None else faces
    canvas = _canvas_size(image_size)
    face = faces[int(rng.integers(len(faces)))]
    stroke = int(rng.integers(0, 3)) * canvas // 96  # none, ~1 % or ~2 % of the canvas
    glyph = _draw_tight(char, face, size=canvas, stroke=stroke)
    placed = _place(glyph, Pose.random(rng), canvas=canvas)
    return _finish(
        placed, image_size=image_size, blur=rng.uniform(0.0, 0.8), brightness=rng.uniform(0.7, 1.0)
    )


def render_clean(char: str, *, face: Face, image_size: int) -> np.ndarray:
    """``char`` in ``face``, upright and centred, without any random variation."""
    canvas = _canvas_size(image_size)
    placed = _place(_draw_tight(char, face, size=canvas, stroke=0), Pose(), canvas=canvas)
    return _finish(placed, image_size=image_size, blur=0.0, brightness=1.0)


def build_glyph_images(*, image_size: int, seed: int,
                       chars: tuple[str, ...] = GLYPH_CHARS) -> ImageSet:
    """Render :data:`IMAGES_PER_CLASS` images of every character of ``chars``."""
    started = time.perf_counter()
    images = np.empty((len(chars) * IMAGES_PER_CLASS, 1, image_size, image_size), np.uint8)
    for label, char in enumerate(chars):
        rng = np.random.default_rng([seed, ord(char)])
        faces = faces_for(char)
        for j in range(IMAGES_PER_CLASS):
            images[label * IMAGES_PER_CLASS + j, 0] = render_glyph(
                char, image_size=image_size, rng=rng, faces=faces
            )
    labels = np.repeat(np.arange(len(chars), dtype=np.int64), IMAGES_PER_CLASS)
    logger.info(
        "rendered %d glyph images in %.1fs", images.shape[0], time.perf_counter() - started
    )
    return ImageSet(
        images=torch.from_numpy(images),
        labels=labels,
        class_names=tuple(class_name(c) for c in chars),
    )


def _fingerprint(chars: tuple[str, ...]) -> str:
    """What the cached images depend on besides seed and size."""
    parts = [
        f"v{FORMAT_VERSION}",
        f"n{IMAGES_PER_CLASS}",
        "".join(chars),
        ",".join(os.path.basename(path) for path in font_files()),
        f"pillow{PIL.__version__}",
        f"matplotlib{matplotlib.__version__}",
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def glyph_cache_path(*, image_size: int, seed: int, name: str = "glyphs") -> str:
    """Where the images of the glyph dataset ``name`` for ``image_size`` and ``seed`` are
    cached."""
    return str(cache_dir() / f"{name}-v{FORMAT_VERSION}-{image_size}px-seed{seed}.npz")


def _load_glyphs(name: str, chars: tuple[str, ...], *, image_size: int, seed: int) -> Dataset:
    path = Path(glyph_cache_path(image_size=image_size, seed=seed, name=name))
    fingerprint = _fingerprint(chars)
    shape = (len(chars) * IMAGES_PER_CLASS, 1, image_size, image_size)
    images = load_cached(path, fingerprint=fingerprint)
    if images is not None and tuple(images.images.shape) != shape:
        logger.warning("cache %s holds images of shape %s: rebuilding", path, images.images.shape)
        images = None
    if images is None:
        images = build_glyph_images(image_size=image_size, seed=seed, chars=chars)
        save_cached(path, images, fingerprint=fingerprint)
    return Dataset.with_standard_split(name=name, images=images)


@register_dataset(
    "glyphs",
    description=(
        f"built in: {len(GLYPH_CHARS)} characters x {IMAGES_PER_CLASS} renderings from "
        "matplotlib's fonts (grayscale, random face and affine); no files needed"
    ),
)
def _build_glyphs(*, root: str | None, image_size: int, seed: int) -> Dataset:
    return _load_glyphs("glyphs", GLYPH_CHARS, image_size=image_size, seed=seed)


@register_dataset(
    "glyphs_b",
    description=(
        f"built in: {len(GLYPH_CHARS_B)} characters glyphs lacks (Cyrillic, Armenian, Hebrew, "
        f"Georgian, arrows, maths, shapes) x {IMAGES_PER_CLASS} renderings, drawn as glyphs "
        "are; no files needed"
    ),
)
def _build_glyphs_b(*, root: str | None, image_size: int, seed: int) -> Dataset:
    return _load_glyphs("glyphs_b", GLYPH_CHARS_B, image_size=image_size, seed=seed)
