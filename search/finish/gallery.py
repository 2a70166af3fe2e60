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

The neighbours and AP@R are the retrieval metrics' own
(:func:`dmlsearch.trainables.metrics.retrieval.query_retrievals`: the same faiss search, cosine on
L2-normalised embeddings, the query excluded by index), and the pairs are the verification
metrics' own trials (:func:`dmlsearch.trainables.metrics.verification.score_pairs`). Only the
images drawn are read (:class:`ImageReader`; a file-backed set decodes just those files).
Figures use matplotlib's object API and :func:`dmlsearch.search.reporting.plots.save_png`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import Protocol

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dmlsearch.search.reporting.plots import figure
from dmlsearch.search.reporting.plots import save_png

__all__ = ["DEFAULT_K", "DEFAULT_SAMPLE", "DEFAULT_WORST", "HardPairs", "ImageReader",
           "Retrievals", "TopGallery", "choose_queries", "hard_pairs", "hard_pairs_gallery",
           "model_retrievals", "retrieval_gallery", "short_name", "side_by_side_gallery"]

DEFAULT_K = 8
"""Neighbours drawn per query."""
DEFAULT_SAMPLE = 6
"""Random queries drawn (fixed seed)."""
DEFAULT_WORST = 6
"""Worst queries drawn (lowest AP@R)."""
DEFAULT_PAIRS = 8
"""Pairs drawn of each kind in the hard-pairs picture."""
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


class ImageSource(Protocol):
    """A test image set: an in-memory ``ImageSet`` or a file-backed ``FileImageSet``."""

    labels: np.ndarray
    class_names: tuple[str, ...]

    def __len__(self) -> int: ...


class ImageReader:
    """The pixels and class names of the images a picture draws, each read once.

    ``images`` is the test set whose order the embeddings follow. An in-memory set's rows are
    copied out one by one; a file-backed set decodes only the files asked for (its evaluation
    transform: what the model saw). :meth:`keep` gives a reader of only some images, detached
    from the set, so a picture drawn later holds no reference to the whole set.
    """

    def __init__(self, images: ImageSource | None) -> None:
        self._images = images
        self._pixels: dict[int, np.ndarray] = {}
        self._names: dict[int, str] = {}
        self._labels: dict[int, int] = {}

    @classmethod
    def of(cls, images: ImageSource | ImageReader) -> ImageReader:
        return images if isinstance(images, ImageReader) else cls(images)

    def __len__(self) -> int:
        return len(self._images) if self._images is not None else len(self._pixels)

    @property
    def read(self) -> list[int]:
        """The ids of the images read so far, sorted."""
        return sorted(self._pixels)

    def label(self, index: int) -> int:
        index = int(index)
        if index not in self._labels:
            self._labels[index] = int(self._set().labels[index])
        return self._labels[index]

    def name(self, index: int) -> str:
        index = int(index)
        if index not in self._names:
            images = self._set()
            self._names[index] = str(images.class_names[int(images.labels[index])])
        return self._names[index]

    def pixels(self, index: int) -> np.ndarray:
        """uint8 ``[H, W]`` (grey) or ``[H, W, 3]`` (RGB) of image ``index``."""
        index = int(index)
        if index not in self._pixels:
            images = self._set()
            decode = getattr(images, "decode", None)  # a file-backed set decodes one file
            chw = decode(index) if callable(decode) else getattr(images, "images")[index]
            to_numpy = getattr(chw, "numpy", None)  # a torch tensor: no copy until np.array
            array = np.array(to_numpy() if callable(to_numpy) else chw, dtype=np.uint8)
            self._pixels[index] = array[0] if array.shape[0] == 1 else array.transpose(1, 2, 0)
        return self._pixels[index]

    def keep(self, indices: np.ndarray) -> ImageReader:
        """A reader of only ``indices`` (read now), detached from the image set."""
        kept = ImageReader(None)
        for i in np.unique(np.asarray(indices, dtype=np.int64)):
            i = int(i)
            kept._pixels[i], kept._names[i], kept._labels[i] = (
                self.pixels(i), self.name(i), self.label(i))
        return kept

    def update(self, other: ImageReader) -> None:
        """Hold the images ``other`` read too."""
        self._pixels.update(other._pixels)
        self._names.update(other._names)
        self._labels.update(other._labels)

    def _set(self) -> ImageSource:
        if self._images is None:
            raise KeyError("this gallery reader holds only the images it kept")
        return self._images


@dataclasses.dataclass(frozen=True)
class Retrievals:
    """One model's retrievals of the gallery's queries: rows ``[:sampled]`` are the random
    sample, the rest the worst queries (of the model that chose them)."""

    title: str
    queries: np.ndarray  # int64 [Q] item ids
    sampled: int
    neighbours: np.ndarray  # int64 [Q, k] item ids, nearest first, the query excluded
    same: np.ndarray  # bool [Q, k]
    similarity: np.ndarray  # float [Q, k] cosine of query and neighbour
    ap_at_r: np.ndarray  # float [Q]
    r_precision: np.ndarray  # float [Q]
    map_at_r: float  # over every query: the test MAP@R
    num_items: int
    seed: int = 0

    def with_title(self, title: str) -> Retrievals:
        return dataclasses.replace(self, title=title)

    @property
    def drawn(self) -> np.ndarray:
        """Every item the picture shows (queries and neighbours)."""
        return np.concatenate([self.queries, self.neighbours.reshape(-1)])


def short_name(name: str, chars: int = NAME_CHARS) -> str:
    """``name`` shortened in the middle to ``chars`` characters (both ends stay readable)."""
    name = " ".join(str(name).split())
    if len(name) <= chars:
        return name
    head = (chars - 1) // 2
    return f"{name[:head]}…{name[len(name) - (chars - 1 - head):]}"


def choose_queries(ap_at_r: np.ndarray, partners: np.ndarray, *, sample: int, worst: int,
                   seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The queries to draw: ``sample`` drawn at random (``seed``) and the ``worst`` ones.

    Only items with a same-class partner are queries (as in the metrics). The worst are those
    with the lowest AP@R (ties: the lower item id first), lowest first; the sample is drawn
    from the other queries and sorted by item id.
    """
    candidates = np.flatnonzero(np.asarray(partners) > 0)
    ap = np.asarray(ap_at_r, dtype=np.float64)[candidates]
    worst_ids = candidates[np.argsort(ap, kind="stable")[: max(0, worst)]]
    rest = np.setdiff1d(candidates, worst_ids)
    rng = np.random.default_rng(seed)
    sample_ids = np.sort(rng.choice(rest, size=min(max(0, sample), len(rest)), replace=False))
    return sample_ids.astype(np.int64), worst_ids.astype(np.int64)


def model_retrievals(
    embeddings: Any, labels: Any, *, k: int = DEFAULT_K, sample: int = DEFAULT_SAMPLE,
    worst: int = DEFAULT_WORST, seed: int = 0, queries: Retrievals | None = None,
    title: str = "",
) -> Retrievals:
    """The retrievals of a test embedding set for the gallery.

    ``queries`` given (another model's :class:`Retrievals` on the same test items): the same
    queries, else :func:`choose_queries`. One exact faiss search, the metrics' own
    (:func:`~dmlsearch.trainables.metrics.retrieval.query_retrievals`).
    """
    from dmlsearch.trainables.metrics.retrieval import query_retrievals

    x = np.asarray(embeddings, dtype=np.float32)
    labels = np.asarray(labels)
    per_query = query_retrievals(x, labels, k=k, similarity="cosine")
    if queries is not None:
        if queries.num_items != len(x):
            raise ValueError(f"the models' test sets differ: {queries.num_items} and {len(x)} "
                             "items; a side-by-side gallery needs the same test images")
        chosen, sampled, seed = queries.queries, queries.sampled, queries.seed
    else:
        sample_ids, worst_ids = choose_queries(per_query.ap_at_r, per_query.partners,
                                               sample=sample, worst=worst, seed=seed)
        chosen, sampled = np.concatenate([sample_ids, worst_ids]), len(sample_ids)
    neighbours = per_query.neighbours[chosen]

    def unit(rows: np.ndarray) -> np.ndarray:  # only the rows drawn: no copy of the whole set
        v = x[rows].astype(np.float64)
        return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)

    similarity = np.einsum("qd,qkd->qk", unit(chosen), unit(neighbours))
    mask = per_query.partners > 0
    return Retrievals(title=title, queries=chosen, sampled=sampled, neighbours=neighbours,
                      same=per_query.same[chosen], similarity=similarity,
                      ap_at_r=per_query.ap_at_r[chosen],
                      r_precision=per_query.r_precision[chosen],
                      map_at_r=float(per_query.ap_at_r[mask].mean()), num_items=len(x),
                      seed=seed)


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
    _check_labels(labels, reader)
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
    height = head + sum(_SECTION_H + len(rows) * _ROW_H for _, rows in sections) + _MARGIN
    canvas = _Canvas(width, height)
    canvas.text(_MARGIN, 0.15, _fit(f"{model.title + ': ' if model.title else ''}retrievals on "
                f"the test classes ({model.num_items} images, MAP@R {model.map_at_r:.3f})",
                width - 2 * _MARGIN, points=11), fontsize=11, weight="bold")
    canvas.text(_MARGIN, _LEGEND_TOP, legend, fontsize=8, color="#444444")
    top = head
    for label, rows in sections:
        canvas.text(_MARGIN, top + 0.08, label[0].upper() + label[1:], fontsize=9.5,
                    weight="bold")
        top += _SECTION_H
        for row in rows:
            _query_cell(canvas, reader, model, row, _MARGIN, top)
            _neighbour_cells(canvas, reader, model, row, _MARGIN + _CELL + _QUERY_GAP, top, k)
            top += _ROW_H
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
    height = head + sum(_SECTION_H + len(rows) * _ROW_H for _, rows in sections) + _MARGIN
    canvas = _Canvas(width, height)
    canvas.text(_MARGIN, 0.15, f"The same test queries retrieved by {len(models)} retrained "
                "configurations", fontsize=11, weight="bold")
    canvas.text(_MARGIN, _LEGEND_TOP, legend, fontsize=8, color="#444444")
    lefts = [_MARGIN + _CELL + _QUERY_GAP + i * (block + _QUERY_GAP) for i in range(len(models))]
    for left in lefts[1:]:
        canvas.vline(left - _QUERY_GAP / 2, titles - 0.02, height - _MARGIN)
    for model, left in zip(models, lefts):
        canvas.text(left, titles, _fit(f"{model.title}  (MAP@R {model.map_at_r:.3f})", block),
                    fontsize=9, weight="bold")
    top = head
    for label, rows in sections:
        canvas.text(_MARGIN, top + 0.08, label[0].upper() + label[1:], fontsize=9.5,
                    weight="bold")
        top += _SECTION_H
        for row in rows:
            _query_cell(canvas, reader, first, row, _MARGIN, top, numbers=False)
            for model, left in zip(models, lefts):
                canvas.text(left, top + _NAME_H + _CELL / 2 - 0.15,
                            f"AP@R\n{model.ap_at_r[row]:.2f}", fontsize=8, ha="left")
                _neighbour_cells(canvas, reader, model, row, left + 0.55, top, k)
            top += _ROW_H
    save_png(canvas.fig, path)
    return path


@dataclasses.dataclass(frozen=True)
class HardPairs:
    """The verification trials D gets most wrong: ``positives`` (same class, lowest D) and
    ``negatives`` (different classes, highest D), as ``[P, 2]`` item ids with their scores;
    hardest first, each image in at most one pair of each kind."""

    positives: np.ndarray
    positive_scores: np.ndarray
    positive_cosine: np.ndarray
    negatives: np.ndarray
    negative_scores: np.ndarray
    negative_cosine: np.ndarray
    trials: int


def hard_pairs(embeddings: Any, labels: Any, scorer: Any, *, pairs: int = DEFAULT_PAIRS,
               max_pairs: int = 0, device: Any = None) -> HardPairs:
    """The hardest verification trials under the learned distance D of ``scorer`` (the ``e2e``
    loss's criterion): the metrics' own trials (all pairs i < j, or their fixed-seed sample of
    ``max_pairs``; :func:`~dmlsearch.trainables.metrics.verification.score_pairs`), scored by D
    on the scorer's own device unless ``device`` is given."""
    from dmlsearch.trainables.metrics.verification import pair_indices
    from dmlsearch.trainables.metrics.verification import sample_pairs
    from dmlsearch.trainables.metrics.verification import score_pairs

    x = np.asarray(embeddings, dtype=np.float32)
    n = len(x)
    device = _scorer_device(scorer) if device is None else device
    scores, same = score_pairs(x, labels, scorer=scorer, max_pairs=max_pairs, device=device)
    d, cosine = scores["e2e"], scores["cosine"]
    trials = sample_pairs(n, max_pairs)

    def items(positions: np.ndarray) -> np.ndarray:
        linear = positions if isinstance(trials, int) else trials[positions]
        i, j = pair_indices(linear, n)
        return np.stack([i, j], axis=1)

    pos, neg = np.flatnonzero(same), np.flatnonzero(~same)
    pos = _distinct(pos[np.argsort(d[pos], kind="stable")], items, pairs)
    neg = _distinct(neg[np.argsort(-d[neg], kind="stable")], items, pairs)
    return HardPairs(positives=items(pos), positive_scores=d[pos], positive_cosine=cosine[pos],
                     negatives=items(neg), negative_scores=d[neg], negative_cosine=cosine[neg],
                     trials=len(same))


def _distinct(ranked: np.ndarray, items: Any, count: int, *, block: int = 4096) -> np.ndarray:
    """The first ``count`` trials of ``ranked`` (hardest first) whose two images appear in no
    harder chosen trial: one odd image would otherwise fill the picture with its pairs."""
    chosen: list[int] = []
    used: set[int] = set()
    for lo in range(0, len(ranked), block):
        positions = ranked[lo : lo + block]
        for position, (a, b) in zip(positions, items(positions)):
            if int(a) in used or int(b) in used:
                continue
            chosen.append(int(position))
            used.update((int(a), int(b)))
            if len(chosen) == count:
                return np.asarray(chosen, dtype=np.int64)
    return np.asarray(chosen, dtype=np.int64)


def hard_pairs_gallery(
    embeddings: Any, labels: Any, images: ImageSource | ImageReader, scorer: Any, path: Path,
    *, pairs: int = DEFAULT_PAIRS, max_pairs: int = 0, device: Any = None, title: str = "",
    per_line: int = 4,
) -> HardPairs:
    """Draw ``hard_pairs.png``: the hardest positive and negative pairs of :func:`hard_pairs`,
    each pair two images with D and the cosine; returns the pairs drawn."""
    reader = ImageReader.of(images)
    _check_labels(labels, reader)
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
    height = head + sum(_SECTION_H + n * _ROW_H for n in lines) + _MARGIN
    canvas = _Canvas(width, height)
    canvas.text(_MARGIN, 0.15, _fit(f"{title + ': ' if title else ''}hardest verification pairs "
                f"on the test classes ({found.trials:,} trials)", width - 2 * _MARGIN,
                points=11), fontsize=11, weight="bold")
    canvas.text(_MARGIN, _LEGEND_TOP, legend, fontsize=8, color="#444444")
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
        _check_labels(labels, reader)
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
def _check_labels(labels: Any, reader: ImageReader) -> None:
    """The embeddings' labels must be those of the images, in order (same test set)."""
    labels = np.asarray(labels).reshape(-1)
    images = reader._images
    if images is None:
        return
    if len(labels) != len(images) or not np.array_equal(labels, np.asarray(images.labels)):
        raise ValueError(f"the {len(labels)} labels of the embeddings are not those of the "
                         f"{len(images)} test images, in order")


def _scorer_device(scorer: Any) -> Any:
    parameters = getattr(scorer, "parameters", None)
    if callable(parameters):
        for parameter in parameters():
            return parameter.device
    return "cpu"


def _wrap(text: str, width_in: float, *, points: float = 8) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``points`` (DejaVu Sans
    averages about 0.55 em a character; 0.6 leaves room)."""
    import textwrap

    chars = max(20, int((width_in - 2 * _MARGIN) * 72 / (0.6 * points)))
    return "\n".join(textwrap.wrap(text, chars))


def _legend_end(legend: str) -> float:
    """Where a legend of :func:`_wrap` lines drawn at :data:`_LEGEND_TOP` ends (inches)."""
    return _LEGEND_TOP + _LEGEND_LINE * (legend.count("\n") + 1)


def _fit(text: str, width_in: float, *, points: float = 9) -> str:
    """``text`` cut to fit ``width_in`` inches at ``points`` (bold: about 0.6 em a character)."""
    chars = max(10, int(width_in * 72 / (0.6 * points)))
    return text if len(text) <= chars else text[: chars - 1] + "…"
