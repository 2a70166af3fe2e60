"""The retrieval galleries: real PNGs of the expected size on the built-in glyphs (grey) and on an
RGB folder (in memory and file-backed); the neighbours drawn are the retrieval metrics' own and
the worst queries those of lowest AP@R; only the images drawn are read; the side-by-side gallery
of several models, and of the search's retrained top configurations (logged to the study's
run); the hardest pairs of a tiny e2e model trained on glyphs; the report's link."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient
from PIL import Image

from dmlsearch.search.finish import gallery
from dmlsearch.search.finish import retrievals
from dmlsearch.search.finish.retrain_runs import GALLERY_ARTIFACTS
from dmlsearch.search.finish.retrain_runs import retrain_top
from dmlsearch.search.readback import load_summary
from dmlsearch.search.reporting.markdown import render_report
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.tracking import Tracker
from dmlsearch.trainables.metrics import _knn as knn
from dmlsearch.trainables.metrics.retrieval import query_retrievals
from dmlsearch.trainables.metrics.retrieval import retrieval_metrics
from dmlsearch.trainables.metrics.verification import pair_indices
from dmlsearch.trainables.metrics.verification import sample_pairs
from dmlsearch.trainables.metrics.verification import score_pairs
from tests.helpers import make_study
from tests.helpers import read_png
from tests.helpers import small_config
from tests.helpers import trial_record

DPI = 100  # save_png's


@pytest.fixture(scope="module")
def glyphs(module_cache: Path) -> Any:
    """The test classes of the built-in glyphs: 1,200 grey images of 60 classes."""
    from dmlsearch.trainables.data import load_dataset

    return load_dataset("glyphs").test()


@pytest.fixture(scope="module")
def e2e(module_cache: Path) -> tuple[Any, Any]:
    """A tiny e2e model (learned distance D) retrained on glyphs for 1 epoch, and its config."""
    from dmlsearch.trainables.retrain import retrain

    cfg = small_config(loss="e2e", metric="eer_e2e", epochs=1, embedding_size=16,
                       verify_pairs=20_000, **{"loss.d_size": 32, "loss.d_layers": 1})
    return retrain(cfg), cfg


def _clustered(labels: np.ndarray, seed: int, noise: float, dim: int = 16) -> np.ndarray:
    """Embeddings near one random centre per class: a model that retrieves well, not perfectly."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(int(labels.max()) + 1, dim))
    return (centres[labels] + noise * rng.normal(size=(len(labels), dim))).astype(np.float32)


def _png_size(path: Path) -> tuple[int, int]:
    """(height, width) in pixels of a real PNG."""
    image = read_png(path)
    return image.shape[0], image.shape[1]


@pytest.fixture(scope="module")
def rgb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A class-per-folder tree (the ``folder`` dataset) of 12 classes of 6 random-coloured 24 px
    images, with long class names."""
    root = tmp_path_factory.mktemp("rgb")
    rng = np.random.default_rng(0)
    for c in range(12):
        folder = root / f"a_rather_long_class_name_number_{c:02d}"
        folder.mkdir(parents=True)
        colour = rng.integers(0, 256, size=3)
        for i in range(6):
            pixels = np.clip(colour + rng.normal(0, 30, size=(24, 24, 3)), 0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{i}.png")
    return root


# ---- the neighbours and the queries ---------------------------------------------------------
def test_gallery_draws_the_metrics_own_neighbours_and_the_worst_queries(glyphs: Any,
                                                                         tmp_path: Path) -> None:
    labels = np.asarray(glyphs.labels)
    emb = _clustered(labels, 0, noise=1.3)
    reader = retrievals.ImageReader(glyphs)
    model = gallery.retrieval_gallery(emb, labels, reader, tmp_path / "r.png", seed=3, title="t")
    # 6 + 6 rows of a query and 8 neighbours, a 2-line legend: 10.15 x 19.8 inches.
    assert _png_size(tmp_path / "r.png") == (round(19.8 * DPI), round(10.15 * DPI))
    queries, sampled = model.queries, model.sampled
    assert sampled == 6 and len(queries) == 12 and model.neighbours.shape == (12, 8)

    # The neighbours are those of the metrics' own faiss search (itself excluded), which are
    # those of a brute-force sort of the cosine similarities.
    x = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    ((_, ids),) = knn.knn_chunks(x, 9, inner_product=True, gpu=None, chunk=len(x))
    faiss_ids = np.array([[j for j in ids[q] if j != q][:8] for q in queries])
    sim = x @ x.T
    brute = np.array([[j for j in np.argsort(-sim[q], kind="stable") if j != q][:8]
                      for q in queries])
    assert (model.neighbours == faiss_ids).all() and (model.neighbours == brute).all()
    assert (model.same == (labels[model.neighbours] == labels[queries, None])).all()
    np.testing.assert_allclose(model.similarity, np.take_along_axis(sim[queries],
                                                                    model.neighbours, 1),
                               atol=1e-5)
    per_query = query_retrievals(emb, labels, k=8)
    np.testing.assert_array_equal(model.ap_at_r, per_query.ap_at_r[queries])
    np.testing.assert_array_equal(model.r_precision, per_query.r_precision[queries])
    assert model.map_at_r == pytest.approx(retrieval_metrics(emb, labels)["map@r"])

    # The worst rows are the lowest AP@R, lowest first; the sample is other queries.
    worst, sample = queries[sampled:], queries[:sampled]
    others = np.setdiff1d(np.flatnonzero(per_query.partners > 0), worst)
    assert per_query.ap_at_r[worst].max() <= per_query.ap_at_r[others].min()
    assert (np.diff(per_query.ap_at_r[worst]) >= 0).all()
    assert not set(sample) & set(worst)
    again = retrievals.model_retrievals(emb, labels, seed=3)
    other = retrievals.model_retrievals(emb, labels, seed=4)
    assert (again.queries == queries).all()
    assert (other.queries[sampled:] == worst).all()
    assert set(other.queries[:sampled]) != set(sample)

    # Only the images drawn were read, as they are in the set.
    assert reader.read == sorted(set(model.drawn.tolist()))
    q = int(queries[0])
    assert (reader.pixels(q) == glyphs.images[q, 0].numpy()).all()
    assert reader.name(q) == glyphs.class_names[labels[q]]


def test_labels_must_be_those_of_the_images(glyphs: Any, tmp_path: Path) -> None:
    labels = np.asarray(glyphs.labels)
    with pytest.raises(ValueError, match="not those of the 1200 test images"):
        gallery.retrieval_gallery(_clustered(labels, 0, 1.0), labels[::-1], glyphs,
                                  tmp_path / "r.png")
    assert not (tmp_path / "r.png").exists()


def test_short_names_keep_both_ends() -> None:
    assert gallery.short_name("U+00A5 ¥") == "U+00A5 ¥"
    short = gallery.short_name("Alphabet_of_the_Magi/character01")
    assert short == "Alphab…acter01" and len(short) == gallery.NAME_CHARS


# ---- RGB, in memory and from files -------------------------------------------------------------
def test_gallery_of_rgb_images_in_memory_and_from_files(rgb: Path, tmp_path: Path) -> None:
    from dmlsearch.trainables.data import FileImageSet
    from dmlsearch.trainables.data import load_dataset
    from dmlsearch.trainables.data._transforms import TransformSpec

    root = rgb
    memory = load_dataset("folder", root=str(root), image_size=24).test()
    assert memory.channels == 3
    labels = np.asarray(memory.labels)
    model = gallery.retrieval_gallery(_clustered(labels, 1, 1.0), labels, memory,
                                      tmp_path / "memory.png", k=5, sample=3, worst=2)
    # 3 + 2 rows of a query and 5 neighbours, a 3-line legend: 7.0 x 9.37 inches.
    assert _png_size(tmp_path / "memory.png") == (937, 700)
    assert model.neighbours.shape == (5, 5)

    classes = sorted(p.name for p in root.iterdir())
    files = sorted(str(p.relative_to(root)) for p in root.glob("*/*.png"))
    files_set = FileImageSet(
        root=str(root), files=np.asarray(files, dtype=object),
        labels=np.array([classes.index(Path(f).parent.name) for f in files]),
        class_names=tuple(classes), transform=TransformSpec.for_size(24))
    test = files_set.select_classes(np.arange(6, 12))
    reader = retrievals.ImageReader(test)
    labels = np.asarray(test.labels)
    model = gallery.retrieval_gallery(_clustered(labels, 2, 1.0), labels, reader,
                                      tmp_path / "files.png", k=5, sample=3, worst=2)
    assert _png_size(tmp_path / "files.png") == (937, 700)
    # A file-backed set decodes only the files drawn, with its evaluation transform.
    assert reader.read == sorted(set(model.drawn.tolist())) and len(reader.read) < len(test)
    q = int(model.queries[0])
    assert reader.pixels(q).shape == (24, 24, 3)
    assert (reader.pixels(q) == test.decode(q).permute(1, 2, 0).numpy()).all()
    assert reader.name(q).startswith("a_rather_long_class_name_number_0")


# ---- side by side -------------------------------------------------------------------------------
def test_side_by_side_gallery_retrieves_the_first_models_queries(glyphs: Any,
                                                                  tmp_path: Path) -> None:
    labels = np.asarray(glyphs.labels)
    first_emb, second_emb = _clustered(labels, 0, 1.3), _clustered(labels, 1, 0.9)
    top = gallery.TopGallery()
    first = gallery.retrieval_gallery(first_emb, labels, glyphs, tmp_path / "r.png")
    top.add(first.with_title("#1 trial a"), glyphs)
    second = top.retrieve(second_emb, labels, glyphs, title="#2 trial b")
    assert (second.queries == first.queries).all() and second.sampled == first.sampled
    per_query = query_retrievals(second_emb, labels, k=8)
    assert (second.neighbours == per_query.neighbours[first.queries]).all()
    np.testing.assert_array_equal(second.ap_at_r, per_query.ap_at_r[first.queries])
    assert top.titles == ["#1 trial a", "#2 trial b"]
    path = top.draw(tmp_path / "top.png")
    # A query column and two blocks of 5 neighbours: 13.65 x 20.19 inches.
    assert _png_size(path) == (round(20.19 * DPI), round(13.65 * DPI))
    # The collector keeps only what it draws, not the image set.
    assert top._images.read == sorted(set(first.drawn.tolist()) | set(second.drawn.tolist()))
    with pytest.raises(ValueError, match="other queries"):
        gallery.side_by_side_gallery(
            [first, retrievals.model_retrievals(second_emb, labels, seed=9)], glyphs,
            tmp_path / "bad.png")


def test_retrain_top_draws_the_configurations_side_by_side(rgb: Path, tmp_path: Path) -> None:
    study_dir = StudyDir(tmp_path / "study")
    tracker = Tracker(study_dir.default_tracking_uri, "gallery",
                      artifact_location=study_dir.artifacts)
    parent = tracker.start_study(name="study", params={}, tags={})
    configs = [small_config(dataset="folder", data_root=str(rgb), image_size=24, batch_size=8,
                            m_per_class=2, epochs=1, embedding_size=8, lr=lr).to_flat()
               for lr in (3e-3, 1e-3)]
    ranked = [trial_record(t, s, config=c, best_epoch=1)
              for t, s, c in zip(("a", "b"), (0.5, 0.4), configs)]
    outcomes = retrain_top(ranked, top=2, seeds=1, tracker=tracker, register_as=None,
                           views=study_dir.plots)
    for path in (study_dir.embeddings_png, study_dir.retrievals_png,
                 study_dir.retrievals_top_png):
        read_png(path)
    assert not study_dir.hard_pairs_png.exists()  # no learned distance
    client = MlflowClient(study_dir.default_tracking_uri)

    def logged(run: str) -> list[str]:
        return [a.path for a in client.list_artifacts(run, GALLERY_ARTIFACTS)]

    assert logged(parent) == [f"{GALLERY_ARTIFACTS}/retrievals_top.png"]
    assert logged(outcomes[0].runs[0].run_id) == [f"{GALLERY_ARTIFACTS}/retrievals.png"]
    assert logged(outcomes[1].runs[0].run_id) == []


# ---- a learned distance ------------------------------------------------------------------------
def test_hardest_pairs_of_a_tiny_e2e_model(e2e: tuple[Any, Any], tmp_path: Path) -> None:
    result, cfg = e2e
    emb, labels, images, scorer = (result.test_embeddings, result.test_labels,
                                   result.test_images, result.pair_scorer)
    assert scorer is not None and (np.asarray(images.labels) == labels).all()
    found = gallery.hard_pairs_gallery(emb, labels, images, scorer, tmp_path / "pairs.png",
                                       max_pairs=cfg.verify_pairs)
    # Two kinds of 8 pairs, 4 pairs a line: 9.7 x 7.72 inches.
    assert _png_size(tmp_path / "pairs.png") == (772, 970)

    # The metric's own trials (the same fixed-seed sample), scored by D.
    n = len(emb)
    scores, same = score_pairs(emb, labels, scorer=scorer, max_pairs=cfg.verify_pairs)
    assert found.trials == len(same) == cfg.verify_pairs
    i, j = pair_indices(sample_pairs(n, cfg.verify_pairs), n)
    d = scores["e2e"]
    for ids, got, hardest in ((found.positives, found.positive_scores, d[same].min()),
                              (found.negatives, found.negative_scores, d[~same].max())):
        assert len(ids) == retrievals.DEFAULT_PAIRS
        assert got[0] == hardest  # the hardest trial of its kind comes first
        with torch.no_grad():
            again = scorer.pair_scores(torch.from_numpy(emb[ids[:, 0]]),
                                       torch.from_numpy(emb[ids[:, 1]])).numpy()
        np.testing.assert_allclose(got, again, atol=1e-5)
        assert len(np.unique(ids)) == 2 * len(ids)  # each image in one pair
    assert (labels[found.positives[:, 0]] == labels[found.positives[:, 1]]).all()
    assert (labels[found.negatives[:, 0]] != labels[found.negatives[:, 1]]).all()
    assert (np.diff(found.positive_scores) >= 0).all()
    assert (np.diff(found.negative_scores) <= 0).all()
    # A same-class trial harder than the last one drawn shares an image with a harder one drawn.
    used = set(found.positives.ravel().tolist())
    harder = same & (d < found.positive_scores[-1])
    assert all(a in used or b in used for a, b in zip(i[harder], j[harder]))


def test_retrain_draws_and_logs_the_galleries_of_an_e2e_model(e2e: tuple[Any, Any],
                                                              tmp_path: Path) -> None:
    from dmlsearch.search.finish.retrain_runs import _galleries

    result, cfg = e2e
    study_dir = StudyDir(tmp_path)
    tracker = Tracker(study_dir.default_tracking_uri, "gallery",
                      artifact_location=study_dir.artifacts)
    run = tracker.log_retrain(name="retrain", config=cfg.to_flat(),
                              test_metrics=result.test_metrics, history=[], tags={})
    _galleries(result, cfg, views=study_dir.plots, top=None, top_title="", tracker=tracker,
               run_id=run, run_name="retrain")
    read_png(study_dir.retrievals_png)
    read_png(study_dir.hard_pairs_png)
    client = MlflowClient(study_dir.default_tracking_uri)
    assert sorted(a.path for a in client.list_artifacts(run, GALLERY_ARTIFACTS)) == [
        f"{GALLERY_ARTIFACTS}/hard_pairs.png", f"{GALLERY_ARTIFACTS}/retrievals.png"]


# ---- the report -------------------------------------------------------------------------------
def test_the_report_links_the_gallery(glyphs: Any, tmp_path: Path) -> None:
    study_dir = make_study(tmp_path, metric="map@r", trials=[trial_record("a", 0.5)],
                           searched=["lr"], best="a")
    assert "](plots/retrievals.png)" not in render_report(*load_summary(study_dir.path))
    labels = np.asarray(glyphs.labels)
    gallery.retrieval_gallery(_clustered(labels, 0, 1.0), labels, glyphs,
                              study_dir.retrievals_png, k=3, sample=1, worst=1)
    text = render_report(*load_summary(study_dir.path))
    assert "![retrievals](plots/retrievals.png)" in text
    assert "green when of the query's class" in text and "hard_pairs" not in text
