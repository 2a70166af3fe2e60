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


# ---- two processes (pytest-xdist; pyproject's addopts) ----------------------------------------
SHARED_SEARCHES = ("shared_search", "curve_table", "speakers_cache")
"""The session-scoped fixtures that run a real search, record a table or synthesise a corpus
(minutes): every file that asks for one runs in the same worker as the others that do, so each
is made once in the suite, not once per worker."""


def worker_groups(files: dict[str, set[str]]) -> dict[str, str]:
    """Each test file's worker group: the file itself (its tests stay together, so a
    module-scoped fixture runs once), files joined when they ask for one of
    :data:`SHARED_SEARCHES` (``files``: each file's fixtures, its tests' closures together)."""
    parent = {name: name for name in files}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for fixture in SHARED_SEARCHES:
        users = sorted(f for f, fixtures in files.items() if fixture in fixtures)
        for other in users[1:]:
            parent[root(other)] = root(users[0])
    return {name: root(name) for name in files}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With pytest-xdist, each test gets its file's worker group (:func:`worker_groups`), which
    ``--dist loadgroup`` runs in one worker."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    files: dict[str, set[str]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], set()).update(
            getattr(item, "fixturenames", ()))
    groups = worker_groups(files)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item.nodeid.split("::")[0]]))


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
