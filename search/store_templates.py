"""New SQLite stores copied from an empty one made once per library version.

A new study's MLflow store runs MLflow's schema migrations (about 50 of them: 3-5 CPU-seconds on
2 cores) and its Optuna storage creates its tables and stamps their Alembic revision (1-3 s);
every search, comparison and ``train`` into a new folder paid both (docs/benchmarks.md,
orchestration). :func:`seed_store` makes the empty store once, in the cache
(``<cache>/stores/<kind>-<library version>.db``, or ``$DMLSEARCH_STORE_TEMPLATES/...``:
:func:`templates_dir`), and copies it where a new store is asked for:
the same file the library would have made, made by that library. The default experiment is
not in MLflow's template: MLflow adds it when the copy is first opened, with the artifact root
of that moment, as it does for a new file.

Anything unusual (a URL that is not a local SQLite file, a file already there, a cache that
cannot be written, a library that makes its tables some other way) leaves the store to the
library, as before: a template only saves time, it never decides what a store holds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from dmlsearch.trainables.cache import cache_dir

__all__ = ["KINDS", "TEMPLATES_ENV", "seed_store", "sqlite_file", "template_path", "templates_dir"]

logger = logging.getLogger(__name__)

_SQLITE = "sqlite:///"
TEMPLATES_ENV = "DMLSEARCH_STORE_TEMPLATES"


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` URL (``sqlite:////abs`` absolute); None for any other
    store (a server, another database, SQLite in memory, a URL with query options)."""
    if not url.startswith(_SQLITE) or "?" in url:
        return None
    path = url[len(_SQLITE):]
    return Path(path) if path and path != ":memory:" else None


def _mlflow_tables(url: str) -> None:
    """MLflow's tables at their newest revision, without the default experiment."""
    import mlflow.store.db.utils as db_utils
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    try:
        db_utils._initialize_tables(engine)
    finally:
        engine.dispose()


def _optuna_tables(url: str) -> None:
    import optuna

    optuna.storages.RDBStorage(url).engine.dispose()


def _mlflow_version() -> str:
    import mlflow

    return mlflow.__version__


def _optuna_version() -> str:
    import optuna

    return optuna.__version__


# kind: (the library's version, what makes its empty tables at a URL)
KINDS: dict[str, tuple[Callable[[], str], Callable[[str], None]]] = {
    "mlflow": (_mlflow_version, _mlflow_tables),
    "optuna": (_optuna_version, _optuna_tables),
}


def templates_dir() -> Path:
    """Where the empty stores are kept: ``$DMLSEARCH_STORE_TEMPLATES`` if set (a data cache on a
    shared or read-only file system, a cache made afresh for each job, many caches that should
    share one set), else ``<cache>/stores``."""
    configured = os.environ.get(TEMPLATES_ENV)
    return Path(configured).expanduser() if configured else cache_dir() / "stores"


def template_path(kind: str) -> Path:
    """Where the empty store of ``kind`` for the installed library version is kept."""
    version, _ = KINDS[kind]
    return templates_dir() / f"{kind}-{version()}.db"


def _made_template(kind: str) -> Path | None:
    """The template of ``kind``, made now when there is none (written beside and moved into
    place: processes making it at once each finish their own); None when it cannot be made."""
    template = template_path(kind)
    if template.is_file():
        return template
    scratch = template.with_name(f".{template.name}.{uuid.uuid4().hex}")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        KINDS[kind][1](f"{_SQLITE}{scratch}")
        os.replace(scratch, template)
    except Exception as exc:  # noqa: BLE001 - a template is an optimisation: the store decides
        logger.debug("no %s store template (%s): the library makes the store", kind, exc)
        with contextlib.suppress(OSError):
            scratch.unlink(missing_ok=True)
        return None
    return template


def seed_store(url: str, kind: str) -> bool:
    """Put the empty store of ``kind`` at ``url`` when it is a local SQLite file that does not
    exist yet; True when it did. Never replaces a file: the copy is linked into place, so a
    store another process made meanwhile is kept."""
    path = sqlite_file(url)
    if path is None or path.exists() or not path.parent.is_dir():
        return False
    template = _made_template(kind)
    if template is None:
        return False
    scratch = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    try:
        shutil.copyfile(template, scratch)
        os.link(scratch, path)
    except OSError as exc:  # there now, or a file system without links: the library makes it
        logger.debug("%s store not seeded at %s (%s)", kind, path, exc)
        return False
    finally:
        scratch.unlink(missing_ok=True)
    return True
