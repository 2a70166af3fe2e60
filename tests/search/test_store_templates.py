"""New SQLite stores copied from the empty one of the installed MLflow / Optuna
(``search/store_templates.py``): checked against the store each library makes itself, file by
file (every table's schema, the revision stamps, what a client reads back), and never in the way
of a store that exists or is not a local file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from dmlsearch.search.store_templates import TEMPLATES_ENV
from dmlsearch.search.store_templates import seed_store
from dmlsearch.search.store_templates import sqlite_file
from dmlsearch.search.store_templates import template_path
from dmlsearch.search.store_templates import templates_dir
from dmlsearch.search.tracking import Tracker
from dmlsearch.search.tune.study import create_storage


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(TEMPLATES_ENV, raising=False)  # the suite's shared ones (conftest.py)
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is read from here


def _clauses(sql: str | None) -> tuple[str, ...]:
    """A CREATE statement's clauses, sorted: a table rebuilt by a migration lists its CHECK
    constraints in an order that varies from one migration run to the next."""
    return tuple(sorted(line.strip().rstrip(",").strip() for line in (sql or "").splitlines()))


def _schema(path: Path) -> dict[str, object]:
    """Every table's and index's SQL (its clauses), and the rows of the revision tables."""
    with sqlite3.connect(path) as db:
        sql = sorted((kind, name, _clauses(text)) for kind, name, text
                     in db.execute("SELECT type, name, sql FROM sqlite_master"))
        stamps = {t: sorted(db.execute(f"SELECT * FROM {t}"))  # noqa: S608 - fixed names
                  for t in ("alembic_version", "version_info")
                  if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()}
    return {"sql": sql, "stamps": stamps}


def _experiments(uri: str) -> list[tuple[str, str, str, str]]:
    return sorted((e.experiment_id, e.name, e.artifact_location, e.lifecycle_stage)
                  for e in MlflowClient(tracking_uri=uri).search_experiments())


def test_a_seeded_mlflow_store_is_the_store_mlflow_makes(tmp_path: Path) -> None:
    own, seeded = tmp_path / "own.db", tmp_path / "seeded.db"
    own_uri, seeded_uri = f"sqlite:///{own}", f"sqlite:///{seeded}"
    assert _experiments(own_uri)  # MLflow makes its own store
    assert seed_store(seeded_uri, "mlflow") and template_path("mlflow").is_file()
    assert _experiments(seeded_uri) == _experiments(own_uri)  # the default experiment, as new
    assert _schema(seeded) == _schema(own)
    # what the product does with it: an experiment, a run, a metric, read back
    tracker = Tracker(seeded_uri, "study", artifact_location=tmp_path / "art")
    client = MlflowClient(tracking_uri=seeded_uri)
    run = client.create_run(tracker.experiment_id)
    client.log_metric(run.info.run_id, "score", 0.5)
    assert client.get_run(run.info.run_id).data.metrics == {"score": 0.5}


def test_a_seeded_optuna_storage_is_the_one_optuna_makes(tmp_path: Path) -> None:
    own, seeded = tmp_path / "own.db", tmp_path / "seeded.db"
    optuna.storages.RDBStorage(f"sqlite:///{own}").engine.dispose()
    create_storage(f"sqlite:///{seeded}")  # the product's call: seeded from the template
    assert template_path("optuna").is_file()
    assert _schema(seeded) == _schema(own)
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{seeded}")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    assert len(optuna.load_study(study_name="s", storage=f"sqlite:///{seeded}").trials) == 2


def test_the_template_is_made_once_and_a_store_that_exists_is_never_replaced(
        tmp_path: Path) -> None:
    assert seed_store(f"sqlite:///{tmp_path / 'a.db'}", "optuna")
    template = template_path("optuna")
    made = template.stat().st_mtime_ns
    assert seed_store(f"sqlite:///{tmp_path / 'b.db'}", "optuna")
    assert template.stat().st_mtime_ns == made
    there = tmp_path / "there.db"
    there.write_bytes(b"a user's file")
    assert not seed_store(f"sqlite:///{there}", "optuna")
    assert there.read_bytes() == b"a user's file"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("url", ["http://127.0.0.1:5000", "postgresql://u@h/db",
                                 "sqlite:///:memory:", "sqlite://", "sqlite:///x.db?mode=ro",
                                 "file:///tmp/mlruns"])
def test_only_a_local_sqlite_file_is_seeded(url: str) -> None:
    assert sqlite_file(url) is None
    assert not seed_store(url, "mlflow")


def test_a_cache_that_cannot_be_written_leaves_the_store_to_the_library(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("DMLSEARCH_CACHE", str(blocked))
    path = tmp_path / "mlflow.db"
    assert not seed_store(f"sqlite:///{path}", "mlflow") and not path.exists()
    assert _experiments(f"sqlite:///{path}")  # MLflow makes it, as before


def test_a_missing_folder_is_not_made_by_the_template(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "optuna.db"
    assert not seed_store(f"sqlite:///{path}", "optuna")
    assert not path.parent.exists()


def test_relative_and_absolute_urls_name_their_files() -> None:
    assert sqlite_file("sqlite:///rel/x.db") == Path("rel/x.db")
    assert sqlite_file("sqlite:////abs/x.db") == Path("/abs/x.db")


def test_the_templates_folder_is_the_caches_unless_named(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``$DMLSEARCH_STORE_TEMPLATES`` keeps the templates apart from the data cache (a cache
    that cannot be written, or one made afresh per job, still gets its stores copied)."""
    assert templates_dir() == tmp_path / "cache" / "stores"
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("DMLSEARCH_CACHE", str(blocked))
    monkeypatch.setenv(TEMPLATES_ENV, str(tmp_path / "templates"))
    path = tmp_path / "optuna.db"
    assert seed_store(f"sqlite:///{path}", "optuna")
    assert template_path("optuna").parent == tmp_path / "templates"
    assert _schema(path) == _schema(template_path("optuna"))
