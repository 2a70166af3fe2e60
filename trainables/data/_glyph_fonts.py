"""The characters and fonts of the built-in ``glyphs`` and ``glyphs_b`` datasets.

Each class is one character; its images are that character drawn from the TrueType fonts that
matplotlib ships (DejaVu Sans / Serif / Sans Mono and STIX General, four weights and styles each),
so the dataset needs no download. The characters are chosen to look different from one another:
no cross-script homoglyphs (Latin A / Greek Α / Cyrillic А, O / 0, l / I / 1, B / Β / В, ...), no
lowercase letters that are small copies of their capitals (c/C, o/O, s/S, x/X, v/V, w/W, z/Z,
p/P, k/K, u/U), and no symbol that copies a letter (× / X, ∑ / Σ, ∨ / V, ∧ / Λ).

``glyphs_b`` is a second dataset of the same kind for transfer between searches (issue 36: a
search on one dataset starting from a finished search on another): other characters, none of
``glyphs``', drawn the same way, as Omniglot's evaluation alphabets are other alphabets than its
background ones.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import matplotlib

__all__ = [
    "GLYPH_CHARS",
    "GLYPH_CHARS_B",
    "MIN_FONTS_PER_CHAR",
    "Face",
    "all_faces",
    "class_name",
    "faces_for",
    "font_files",
]

#: One class per character, in code-point order (so class ids are sorted by class name).
GLYPH_CHARS: tuple[str, ...] = tuple(
    sorted(
        "23456789"  # no 0 (O), 1 (l, I)
        "ABCDEFGHJKLMNOPQRSTUVWXYZ"  # no I (l, 1)
        "abdefghimnqrty"  # lowercase letters unlike their capital (no c, o, s, ..., no j/J)
        "βδεζλμσω"  # Greek lowercase unlike Latin letters (no α/a, γ/y, η/n, ξ/ζ, ο, ρ, ...)
        "ΓΔΘΞΠΣΦΨΩ"  # Greek capitals unlike any Latin capital
        "БДЖИЛЦЧШЪЫЭЮЯ"  # Cyrillic capitals unlike Latin and Greek ones
        "#%&@?!+=<>*§¶¥£€¢©®"  # no $ (S), | (l), × (X), - and . (too simple)
        "∞∫√∇≈≠≤≥÷♠♣♥♦♪★→←↑↓⊕⊗∃⊥ℵ"  # no ∑ (Σ), ∪ (U), ∩ (n), ⊂ (C), ∈ (ε), ∂ (δ), ∀ (V)
    )
)

#: ``glyphs_b``'s classes: 120 characters of other scripts and symbol blocks, none in
#: :data:`GLYPH_CHARS`, in code-point order. Chosen greedily, in this order, from candidate pools
#: (14 Cyrillic lowercase, 20 Armenian capitals, 14 Hebrew letters, 26 Georgian letters, 14 arrows,
#: 16 mathematical operators, 16 geometric shapes), a candidate kept when every one of its faces
#: draws it at least 0.21 from each character kept before (the distance of
#: tests/trainables/test_data_glyphs.py; 0.21 is ``glyphs``' own closest pair, H / Π) and away
#: from the missing-glyph box.
GLYPH_CHARS_B: tuple[str, ...] = tuple(
    sorted(
        "бгджзилфцчшъыэ"  # Cyrillic lowercase
        "ԲԳԴԵԶԷԹԺԻԼԽԾԿՀՁՂՃՄՅՇ"  # Armenian capitals
        "אבגדהוזחטיכלמנ"  # Hebrew
        "აბგდევზთიკლმნოპჟრსტუფქღყშჩ"  # Georgian
        "↔↕↖↗↘↙↚↛↜↝↞↟↠↡"  # arrows
        "∀∂∅∈∋∏∝∠∧∨∩∪∴∵⊂⊃"  # mathematical operators
        "■□▲△▼▽◆◇◊○●◐◑◒◓◔"  # geometric shapes
    )
)

#: A character drawn in fewer of the fonts than this is a programming error (too little variety).
MIN_FONTS_PER_CHAR = 4

#: The faces used, by file name under ``matplotlib.get_data_path()/fonts/ttf``.
_FONT_FILES: tuple[str, ...] = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSans-BoldOblique.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSerif-BoldItalic.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
    "DejaVuSansMono-Oblique.ttf",
    "DejaVuSansMono-BoldOblique.ttf",
    "STIXGeneral.ttf",
    "STIXGeneralBol.ttf",
    "STIXGeneralItalic.ttf",
    "STIXGeneralBolIta.ttf",
)


@dataclass(frozen=True)
class Face:
    """One font file and the code points it has a glyph for (from its ``cmap`` table)."""

    path: str
    codepoints: frozenset[int]

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def _font_dir() -> str:
    return os.path.join(matplotlib.get_data_path(), "fonts", "ttf")


def font_files() -> tuple[str, ...]:
    """Paths of the faces of :data:`_FONT_FILES` present in this matplotlib install (cheap)."""
    paths = (os.path.join(_font_dir(), name) for name in _FONT_FILES)
    return tuple(path for path in paths if os.path.isfile(path))


@functools.lru_cache(maxsize=1)
def all_faces() -> tuple[Face, ...]:
    """Every face of :func:`font_files` with the code points its ``cmap`` maps to glyphs."""
    from fontTools.ttLib import TTFont  # a matplotlib dependency; only needed to build glyphs

    faces = []
    for path in font_files():
        with TTFont(path, lazy=True) as font:
            faces.append(Face(path=path, codepoints=frozenset(font.getBestCmap())))
    return tuple(faces)


def faces_for(char: str) -> tuple[Face, ...]:
    """The faces that have a real glyph for ``char`` (not the missing-glyph box)."""
    faces = tuple(f for f in all_faces() if ord(char) in f.codepoints)
    if len(faces) < MIN_FONTS_PER_CHAR:
        raise RuntimeError(
            f"glyphs: {char!r} (U+{ord(char):04X}) is drawn by {len(faces)} of the fonts in "
            f"{_font_dir()}, expected at least {MIN_FONTS_PER_CHAR}: is matplotlib complete?"
        )
    return faces


def class_name(char: str) -> str:
    """Readable class name of a character, e.g. ``"U+03A9 Ω"``."""
    return f"U+{ord(char):04X} {char}"
