"""The retrained model's views: the 2-D projection against a NumPy reference, and a map whose
classes stay together, as a real PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dmlsearch.search.finish import views
from tests.helpers import read_png


def test_pca_projection_against_numpy_reference() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 5)) * np.array([5.0, 3.0, 1.0, 0.5, 0.1])
    points, method = views.project_2d(x)
    assert method == "PCA"
    centred = x - x.mean(axis=0)
    eigvals, eigvecs = np.linalg.eigh(np.cov(centred.T))
    top = eigvecs[:, np.argsort(eigvals)[::-1][:2]]
    reference = centred @ top
    for k in range(2):  # the sign of a principal axis is arbitrary
        assert np.allclose(np.abs(points[:, k]), np.abs(reference[:, k]), atol=1e-8)


def test_embedding_view_separates_clusters_and_writes_aread_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(30, 16)) * 4
    labels = np.repeat(np.arange(30), 10)
    emb = centres[labels] + rng.normal(size=(300, 16)) * 0.1
    points, method = views.project_2d(emb[labels < 5])
    assert method == "t-SNE" and points.shape == (50, 2)
    # Points of a class sit closer to each other than to other classes in the map.
    lab = labels[labels < 5]
    d = np.linalg.norm(points[:, None] - points[None], axis=-1)
    same = d[lab[:, None] == lab[None]].mean()
    other = d[lab[:, None] != lab[None]].mean()
    assert same < 0.3 * other
    path = views.embedding_view(emb, labels, tmp_path / "e.png", max_classes=20)
    read_png(path)


