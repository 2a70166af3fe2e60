"""Fixtures shared by the trainables' tests: a private cache for the built-in dataset and its
fixed class-disjoint split (built once per session: the glyphs take a few seconds to draw)."""

from __future__ import annotations

import os
from typing import Any

import pytest


@pytest.fixture(scope="session", autouse=True)
def _glyphs_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never write to the home folder (CI sets its own ``DMLSEARCH_CACHE``)."""
    os.environ.setdefault("DMLSEARCH_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="session")
def split() -> tuple[Any, Any]:
    """(train, validation) image sets of ``glyphs``: 20% of the training classes held out."""
    from dmlsearch.trainables.data import load_dataset
    from dmlsearch.trainables.protocol import fixed_split

    data = load_dataset("glyphs")
    s = fixed_split(data.train_classes, val_ratio=0.2, seed=0)
    return data.images.select_classes(s.train_classes), data.images.select_classes(s.val_classes)
