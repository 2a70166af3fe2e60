"""What a retrained model retrieves on the test classes, as the numbers its galleries draw
(:mod:`.gallery`): the queries (a fixed-seed random sample and the worst by AP@R), their nearest
neighbours by cosine, and, for a learned distance D (loss ``e2e``), the verification pairs D
gets most wrong.

The neighbours and AP@R are the retrieval metrics' own
(:func:`dmlsearch.trainables.metrics.retrieval.query_retrievals`: the same faiss search, cosine on
L2-normalised embeddings, the query excluded by index), and the pairs are the verification
metrics' own trials (:func:`dmlsearch.trainables.metrics.verification.score_pairs`). Only the
images drawn are read (:class:`ImageReader`; a file-backed set decodes just those files).
"""

from __future__ import annotations

import dataclasses
from typing import Any
from typing import Protocol

import numpy as np

from dmlsearch.trainables.metrics.retrieval import query_retrievals
from dmlsearch.trainables.metrics.verification import pair_indices
from dmlsearch.trainables.metrics.verification import sample_pairs
from dmlsearch.trainables.metrics.verification import score_pairs

__all__ = ["DEFAULT_K", "DEFAULT_PAIRS", "DEFAULT_SAMPLE", "DEFAULT_WORST", "HardPairs",
           "ImageReader", "ImageSource", "Retrievals", "check_labels", "choose_queries",
           "hard_pairs", "model_retrievals"]

DEFAULT_K = 8
"""Neighbours drawn per query."""
DEFAULT_SAMPLE = 6
"""Random queries drawn (fixed seed)."""
DEFAULT_WORST = 6
"""Worst queries drawn (lowest AP@R)."""
DEFAULT_PAIRS = 8
"""Pairs drawn of each kind in the hard-pairs picture."""


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


def check_labels(labels: Any, reader: ImageReader) -> None:
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
