"""Fixtures shared by every test folder: a real learning-curve table, recorded once per session
on the built-in data by the real ``dmlsearch record-curves`` command; a module's own
``DMLSEARCH_CACHE``; and a cache folder holding the built-in speakers corpus, synthesised once per
session (it needs espeak-ng)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import CURVE_GRID
from tests.helpers import run_cli

_STORE_VARIABLE = "MLFLOW_TRACKING_URI"
_SESSION_STORE = os.environ.get(_STORE_VARIABLE)


def _put_back_the_store() -> None:
    """``mlflow.set_tracking_uri`` (a test reading a store with MLflow's fluent API) exports
    ``MLFLOW_TRACKING_URI``, which every later ``dmlsearch`` (in this process or a child) reads as
    the store to write to: each test starts with the session's value and MLflow's default."""
    import sys

    utils = sys.modules.get("mlflow.tracking._tracking_service.utils")
    moved = utils is not None and utils._tracking_uri is not None
    if moved or os.environ.get(_STORE_VARIABLE) != _SESSION_STORE:
        import mlflow

        mlflow.set_tracking_uri(None)
        os.environ.pop(_STORE_VARIABLE, None)
        if _SESSION_STORE is not None:
            os.environ[_STORE_VARIABLE] = _SESSION_STORE


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _put_back_the_store()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _put_back_the_store()


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private ``DMLSEARCH_CACHE`` for the module that asks for it, set while its tests run:
    what it draws (the glyphs) is drawn once for the module, never in the home folder."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DMLSEARCH_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="session")
def curve_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table of the 6 points of ``tests/data/curves_grid.yaml`` (3 losses x 2 learning
    rates, 3 epochs on glyphs) and 2 of them again with seed 1."""
    root = tmp_path_factory.mktemp("curves")
    table = root / "curves.jsonl"
    proc = run_cli("record-curves", "--space", str(CURVE_GRID), "--out", str(table),
                   "--workers", "2", "--second-seed", "2", cache=root / "cache", cwd=root,
                   timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return table


@pytest.fixture(scope="session")
def speakers_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``DMLSEARCH_CACHE`` folder holding the built-in ``speakers`` corpus (160 voices, about
    40 s to synthesise on 2 cores); skips without the espeak-ng program."""
    import shutil

    if shutil.which("espeak-ng") is None:
        pytest.skip("the built-in speakers need the espeak-ng program (apt-get install "
                    "espeak-ng); .ci/run installs it")
    from dmlsearch.trainables.audio.speakers import build_corpus
    from dmlsearch.trainables.audio.speakers import corpus_dir

    cache = tmp_path_factory.mktemp("speakers-cache")
    build_corpus(corpus_dir(cache, seed=0), seed=0)
    return cache
