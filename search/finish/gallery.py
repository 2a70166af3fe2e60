"""Retrieval galleries: what a retrained model retrieves for test queries, as pictures.

DML users judge a model by looking at its retrievals (open-metric-learning logs its worst
queries with their neighbours; Roth et al.'s baselines save ``sample_recoveries.png``). Three
pictures, all on the *test* classes:

- :func:`retrieval_gallery` (``retrievals.png``): rows of a fixed-seed random sample of queries,
  then of the queries with the lowest AP@R; each row the query, then its ``k`` nearest
  neighbours framed green (the query's class) or red (another class), every image with its
  class name, each query with its AP@R and R-Precision;
- :func:`side_by_side_gallery` (``retrievals_top.png``): the same queries retrieved by several
  retrained configurations, one block of neighbours per configuration;
- :func:`hard_pairs_gallery` (``hard_pairs.png``, a learned distance D: loss ``e2e``): the
  same-class pairs D scores lowest and the different-class pairs it scores highest.

What is drawn is computed by :mod:`.retrievals` (the metrics' own neighbours and pairs); this
module lays it out. Figures use matplotlib's object API and
:func:`dmlsearch.search.reporting.plots.save_png`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dmlsearch.search.finish.retrievals import DEFAULT_K
from dmlsearch.search.finish.retrievals import DEFAULT_PAIRS
from dmlsearch.search.finish.retrievals import DEFAULT_SAMPLE
from dmlsearch.search.finish.retrievals import DEFAULT_WORST
from dmlsearch.search.finish.retrievals import HardPairs
from dmlsearch.search.finish.retrievals import ImageReader
from dmlsearch.search.finish.retrievals import ImageSource
from dmlsearch.search.finish.retrievals import Retrievals
from dmlsearch.search.finish.retrievals import check_labels
from dmlsearch.search.finish.retrievals import hard_pairs
from dmlsearch.search.finish.retrievals import model_retrievals
from dmlsearch.search.reporting.plots import figure
from dmlsearch.search.reporting.plots import save_png

__all__ = ["NAME_CHARS", "TOP_K", "TopGallery", "draw_retrievals", "hard_pairs_gallery",
           "retrieval_gallery", "short_name", "side_by_side_gallery"]

TOP_K = 5
"""Neighbours per configuration in the side-by-side picture (several blocks share its width)."""
NAME_CHARS = 14
"""Class names longer than this are shortened in the middle (``Alphab…ter01``)."""

CORRECT = "#1a9850"  # green: the neighbour has the query's class
WRONG = "#d73027"  # red: another class
QUERY = "#2c6fbb"  # blue: the query

# The layout, in inches: a cell is one image with its name above and a line below.
_CELL = 0.95
_GAP = 0.1  # between neighbours
_QUERY_GAP = 0.4  # between the query and its neighbours, and between blocks
_NAME_H = 0.22
_BELOW_H = 0.26
_ROW_H = _NAME_H + _CELL + _BELOW_H + 0.08
_SECTION_H = 0.34
_MARGIN = 0.25
_FRAME = 3.5  # points
_LEGEND_TOP = 0.42  # the title above it, the first section below it
_LEGEND_LINE = 0.14  # 8 pt lines


def short_name(name: str, chars: int = NAME_CHARS) -> str:
    """``name`` shortened in the middle to ``chars`` characters (both ends stay readable)."""
    name = " ".join(str(name).split())
    if len(name) <= chars:
        return name
    head = (chars - 1) // 2
    return f"{name[:head]}…{name[len(name) - (chars - 1 - head):]}"


# ---- drawing ---------------------------------------------------------------------------------
class _Canvas:
    """A figure laid out in inches from its top-left corner."""

    def __init__(self, width: float, height: float) -> None:
        self.width, self.height = width, height
        self.fig: Figure = figure(width, height)

    def axes(self, left: float, top: float, width: float, height: float) -> Axes:
        return self.fig.add_axes((left / self.width, 1 - (top + height) / self.height,
                                  width / self.width, height / self.height))

    def vline(self, left: float, top: float, bottom: float) -> None:
        self.fig.add_artist(Line2D([left / self.width] * 2,
                                   [1 - top / self.height, 1 - bottom / self.height],
                                   transform=self.fig.transFigure, color="#bbbbbb", lw=1))

    def text(self, left: float, top: float, text: str, **kw: Any) -> None:
        self.fig.text(left / self.width, 1 - top / self.height, text, va="top", **kw)

    def picture(self, reader: ImageReader, index: int, left: float, top: float, *, name: str,
                below: str, frame: str, name_colour: str = "black",
                frame_width: float = _FRAME) -> Axes:
        """Image ``index`` in a cell whose top-left corner is (left, top): its class name above,
        ``below`` under it, a frame of colour ``frame``."""
        ax = self.axes(left, top + _NAME_H, _CELL, _CELL)
        pixels = reader.pixels(index)
        if pixels.ndim == 2:
            ax.imshow(pixels, cmap="gray", vmin=0, vmax=255)
        else:
            ax.imshow(pixels)
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_edgecolor(frame)
            spine.set_linewidth(frame_width)
        ax.set_title(name, fontsize=7.5, color=name_colour, pad=3)
        ax.set_xlabel(below, fontsize=7.5, labelpad=3)
        return ax


def _neighbour_cells(canvas: _Canvas, reader: ImageReader, model: Retrievals, row: int,
                     left: float, top: float, k: int) -> None:
    for col in range(min(k, model.neighbours.shape[1])):
        index = int(model.neighbours[row, col])
        same = bool(model.same[row, col])
        canvas.picture(reader, index, left + col * (_CELL + _GAP), top,
                       name=short_name(reader.name(index)),
                       below=f"{col + 1}: {'✓' if same else '✗'} {model.similarity[row, col]:.3f}",
                       frame=CORRECT if same else WRONG, name_colour="black" if same else WRONG)


def _query_cell(canvas: _Canvas, reader: ImageReader, model: Retrievals, row: int,
                left: float, top: float, *, numbers: bool = True) -> None:
    index = int(model.queries[row])
    canvas.picture(reader, index, left, top, name=short_name(reader.name(index)),
                   below=(f"AP@R {model.ap_at_r[row]:.2f}  RP {model.r_precision[row]:.2f}"
                          if numbers else "query"),
                   frame=QUERY, frame_width=_FRAME + 1)


def _sections(model: Retrievals) -> list[tuple[str, range]]:
    q = len(model.queries)
    out = []
    if model.sampled:
        out.append((f"{model.sampled} random queries (seed {model.seed})", range(model.sampled)))
    if q > model.sampled:
        out.append((f"the {q - model.sampled} worst queries (lowest AP@R"
                    f"{' of ' + model.title if model.title else ''})", range(model.sampled, q)))
    return out


def _titled_canvas(width: float, head: float, body: float, title: str, legend: str) -> _Canvas:
    """A canvas ``width`` wide: ``title`` and ``legend`` at the top, ``body`` inches of rows from
    ``head`` down, a margin below."""
    canvas = _Canvas(width, head + body + _MARGIN)
    canvas.text(_MARGIN, 0.15, title, fontsize=11, weight="bold")
    canvas.text(_MARGIN, _LEGEND_TOP, legend, fontsize=8, color="#444444")
    return canvas


def _sections_height(sections: list[tuple[str, range]]) -> float:
    return sum(_SECTION_H + len(rows) * _ROW_H for _, rows in sections)


def _section_rows(canvas: _Canvas, sections: list[tuple[str, range]],
                  top: float) -> Iterator[tuple[int, float]]:
    """Each section's label drawn from ``top`` down, then its rows: yields each row with the top
    of its place."""
    for label, rows in sections:
        canvas.text(_MARGIN, top + 0.08, label[0].upper() + label[1:], fontsize=9.5,
                    weight="bold")
        top += _SECTION_H
        for row in rows:
            yield row, top
            top += _ROW_H


def _legend(model: Retrievals, k: int) -> str:
    return (f"Each row: a test query (left, blue frame, its AP@R and R-Precision), then its {k} "
            "nearest test images by cosine (query excluded), numbered with their cosine; "
            "green frame ✓ = the query's class, red frame ✗ = another class.")


def retrieval_gallery(
    embeddings: Any, labels: Any, images: ImageSource | ImageReader, path: Path, *,
    k: int = DEFAULT_K, sample: int = DEFAULT_SAMPLE, worst: int = DEFAULT_WORST,
    seed: int = 0, title: str = "",
) -> Retrievals:
    """Draw ``retrievals.png``: the random and the worst test queries with their neighbours.

    ``embeddings`` and ``labels`` are the test set's, in the order of ``images`` (the test image
    set, or a reader of it). Returns the retrievals drawn (their queries serve
    :func:`side_by_side_gallery`).
    """
    reader = ImageReader.of(images)
    check_labels(labels, reader)
    model = model_retrievals(embeddings, labels, k=k, sample=sample, worst=worst, seed=seed,
                             title=title)
    draw_retrievals(model, reader, path, k=k)
    return model


def draw_retrievals(model: Retrievals, images: ImageSource | ImageReader, path: Path, *,
                    k: int = DEFAULT_K) -> Path:
    """Draw one model's :class:`Retrievals` (see :func:`retrieval_gallery`)."""
    reader = ImageReader.of(images)
    k = min(k, model.neighbours.shape[1])
    sections = _sections(model)
    width = 2 * _MARGIN + _CELL + _QUERY_GAP + k * _CELL + (k - 1) * _GAP
    legend = _wrap(_legend(model, k), width)
    head = _legend_end(legend) + 0.05
    title = _fit(f"{model.title + ': ' if model.title else ''}retrievals on the test classes "
                 f"({model.num_items} images, MAP@R {model.map_at_r:.3f})",
                 width - 2 * _MARGIN, points=11)
    canvas = _titled_canvas(width, head, _sections_height(sections), title, legend)
    for row, top in _section_rows(canvas, sections, head):
        _query_cell(canvas, reader, model, row, _MARGIN, top)
        _neighbour_cells(canvas, reader, model, row, _MARGIN + _CELL + _QUERY_GAP, top, k)
    save_png(canvas.fig, path)
    return path


def side_by_side_gallery(models: Sequence[Retrievals], images: ImageSource | ImageReader,
                         path: Path, *, k: int = TOP_K) -> Path:
    """Draw ``retrievals_top.png``: the first model's queries (its random sample and its worst)
    as retrieved by each model, one block of ``k`` neighbours per model, titled by its title
    (e.g. its rank and trial id); each block's rows give that model's AP@R of the query."""
    if not models:
        raise ValueError("a side-by-side gallery needs at least one model")
    first = models[0]
    for model in models[1:]:
        if not np.array_equal(model.queries, first.queries) or model.sampled != first.sampled:
            raise ValueError(f"{model.title or 'a model'} retrieved other queries than "
                             f"{first.title or 'the first'}; give it queries=the first's")
    reader = ImageReader.of(images)
    k = min([k] + [m.neighbours.shape[1] for m in models])
    block = 0.55 + k * _CELL + (k - 1) * _GAP  # 0.55: the block's AP@R column
    width = 2 * _MARGIN + _CELL + len(models) * (_QUERY_GAP + block)
    sections = _sections(first)
    legend = _wrap(
        f"Each row: a test query (left), then for each configuration its AP@R on that query "
        f"and its {k} nearest test images by cosine, numbered with their cosine; green frame ✓ "
        "= the query's class, red frame ✗ = another class.", width)
    titles = _legend_end(legend) + 0.1
    head = titles + 0.34
    canvas = _titled_canvas(width, head, _sections_height(sections),
                            f"The same test queries retrieved by {len(models)} retrained "
                            "configurations", legend)
    lefts = [_MARGIN + _CELL + _QUERY_GAP + i * (block + _QUERY_GAP) for i in range(len(models))]
    for left in lefts[1:]:
        canvas.vline(left - _QUERY_GAP / 2, titles - 0.02, canvas.height - _MARGIN)
    for model, left in zip(models, lefts):
        canvas.text(left, titles, _fit(f"{model.title}  (MAP@R {model.map_at_r:.3f})", block),
                    fontsize=9, weight="bold")
    for row, top in _section_rows(canvas, sections, head):
        _query_cell(canvas, reader, first, row, _MARGIN, top, numbers=False)
        for model, left in zip(models, lefts):
            canvas.text(left, top + _NAME_H + _CELL / 2 - 0.15,
                        f"AP@R\n{model.ap_at_r[row]:.2f}", fontsize=8, ha="left")
            _neighbour_cells(canvas, reader, model, row, left + 0.55, top, k)
    save_png(canvas.fig, path)
    return path


def hard_pairs_gallery(
    embeddings: Any, labels: Any, images: ImageSource | ImageReader, scorer: Any, path: Path,
    *, pairs: int = DEFAULT_PAIRS, max_pairs: int = 0, device: Any = None, title: str = "",
    per_line: int = 4,
) -> HardPairs:
    """Draw ``hard_pairs.png``: the hardest positive and negative pairs of :func:`hard_pairs`,
    each pair two images with D and the cosine; returns the pairs drawn."""
    reader = ImageReader.of(images)
    check_labels(labels, reader)
    found = hard_pairs(embeddings, labels, scorer, pairs=pairs, max_pairs=max_pairs,
                       device=device)
    pair_w = 2 * _CELL + _GAP
    per_line = max(1, min(per_line, max(len(found.positives), len(found.negatives), 1)))
    width = 2 * _MARGIN + per_line * pair_w + (per_line - 1) * _QUERY_GAP
    kinds = [
        (f"Hardest positive pairs: same class, lowest D ({len(found.positives)}; D should be "
         "near 1)", found.positives, found.positive_scores, found.positive_cosine, CORRECT),
        (f"Hardest negative pairs: different classes, highest D ({len(found.negatives)}; D "
         "should be near 0)", found.negatives, found.negative_scores, found.negative_cosine,
         WRONG),
    ]
    lines = [max(1, -(-len(p) // per_line)) for _, p, _, _, _ in kinds]
    legend = _wrap(
        "D = the learned distance model's score of the pair, in (0, 1), higher = same class "
        "(the e2e loss); cos = cosine of the embeddings. Green frames: a same-class pair; red: "
        "two classes.", width)
    head = _legend_end(legend) + 0.05
    heading = _fit(f"{title + ': ' if title else ''}hardest verification pairs on the test "
                   f"classes ({found.trials:,} trials)", width - 2 * _MARGIN, points=11)
    canvas = _titled_canvas(width, head, sum(_SECTION_H + n * _ROW_H for n in lines), heading,
                            legend)
    top = head
    for (label, ids, d, cos, colour), n_lines in zip(kinds, lines):
        canvas.text(_MARGIN, top + 0.08, label, fontsize=9.5, weight="bold")
        top += _SECTION_H
        for p, (a, b) in enumerate(ids):
            left = _MARGIN + (p % per_line) * (pair_w + _QUERY_GAP)
            row_top = top + (p // per_line) * _ROW_H
            canvas.picture(reader, int(a), left, row_top, name=short_name(reader.name(a)),
                           below=f"D {d[p]:.3f}", frame=colour)
            canvas.picture(reader, int(b), left + _CELL + _GAP, row_top,
                           name=short_name(reader.name(b)), below=f"cos {cos[p]:.3f}",
                           frame=colour)
        top += n_lines * _ROW_H
    save_png(canvas.fig, path)
    return found


class TopGallery:
    """Collects the retrievals of several retrained configurations for
    :func:`side_by_side_gallery`: the first added chooses the queries (it is the best one), the
    others retrieve the same queries. Only the images the picture draws are kept."""

    def __init__(self, *, k: int = DEFAULT_K) -> None:
        self.k = k
        self.models: list[Retrievals] = []
        self._images = ImageReader(None)

    @property
    def queries(self) -> Retrievals | None:
        """The first model's retrievals (its queries), or None before one is added."""
        return self.models[0] if self.models else None

    @property
    def titles(self) -> list[str]:
        return [m.title for m in self.models]

    def add(self, model: Retrievals, images: ImageSource | ImageReader) -> None:
        """Keep ``model`` (computed with ``queries=self.queries`` unless it is the first) and
        read the images it shows from ``images``, its test set."""
        if self.models and not np.array_equal(model.queries, self.models[0].queries):
            raise ValueError(f"{model.title} retrieved other queries than {self.models[0].title}")
        self._images.update(ImageReader.of(images).keep(model.drawn))
        self.models.append(model)

    def retrieve(self, embeddings: Any, labels: Any, images: ImageSource | ImageReader, *,
                 title: str, seed: int = 0) -> Retrievals:
        """Compute and :meth:`add` a configuration's retrievals of the first one's queries (the
        first one chooses them, its random sample drawn with ``seed``)."""
        reader = ImageReader.of(images)
        check_labels(labels, reader)
        first = self.queries
        if first is not None and not all(
                reader.label(q) == self._images.label(q) for q in first.queries):
            raise ValueError(f"{title}: its test images are not the first configuration's")
        model = model_retrievals(embeddings, labels, k=self.k, queries=first, title=title,
                                 seed=seed)
        self.add(model, reader)
        return model

    def draw(self, path: Path, *, k: int = TOP_K) -> Path:
        return side_by_side_gallery(self.models, self._images, path, k=k)


# ---- helpers ---------------------------------------------------------------------------------
def _wrap(text: str, width_in: float, *, points: float = 8) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``points`` (DejaVu Sans
    averages about 0.55 em a character; 0.6 leaves room)."""
    chars = max(20, int((width_in - 2 * _MARGIN) * 72 / (0.6 * points)))
    return "\n".join(textwrap.wrap(text, chars))


def _legend_end(legend: str) -> float:
    """Where a legend of :func:`_wrap` lines drawn at :data:`_LEGEND_TOP` ends (inches)."""
    return _LEGEND_TOP + _LEGEND_LINE * (legend.count("\n") + 1)


def _fit(text: str, width_in: float, *, points: float = 9) -> str:
    """``text`` cut to fit ``width_in`` inches at ``points`` (bold: about 0.6 em a character)."""
    chars = max(10, int(width_in * 72 / (0.6 * points)))
    return text if len(text) <= chars else text[: chars - 1] + "…"
