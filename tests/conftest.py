"""Fixtures shared by every test folder: a real learning-curve table, recorded once per session
on the built-in data by the real ``dmlsearch record-curves`` command; a module's own
``DMLSEARCH_CACHE``; a cache folder holding the built-in speakers corpus, synthesised once per
session (it needs espeak-ng); and one folder of empty-store templates for the session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CURVE_GRID
from tests.helpers import run_cli
from tests.scheduling import group_scheduling

# The suite computes with oneDNN's AVX2 kernels on every x86 CPU (set before any oneDNN
# primitive is made; the processes it starts inherit it). The reference traces of the authors'
# code (tests/trainables/fixtures/reference_traces) were recorded on an AMD EPYC whose
# convolutions oneDNN's AVX2 kernels reproduce; its AVX-512 kernels on a Xeon round them
# otherwise, enough to move a MemVir trace past its tolerance within 4 steps (measured on an
# AVX-512 Xeon: 1.1e-5 against 1e-5).
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

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


# ---- two processes: `pytest -n 2` (pytest-xdist; tests/scheduling.py) -------------------------
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Each worker takes whole groups of files (tests/scheduling.py)."""
    return group_scheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _put_back_the_store()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _put_back_the_store()


@pytest.fixture(scope="session", autouse=True)
def store_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One folder of empty MLflow and Optuna stores for the whole session
    (``$DMLSEARCH_STORE_TEMPLATES``, ``search/store_templates.py``): the tests give many
    searches a fresh ``DMLSEARCH_CACHE``, and each would otherwise run MLflow's migrations again
    to make its templates (seconds each). Subprocesses and Ray workers inherit it."""
    from dmlsearch.search.store_templates import TEMPLATES_ENV

    folder = tmp_path_factory.mktemp("store-templates")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(TEMPLATES_ENV, str(folder))
        yield folder


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
