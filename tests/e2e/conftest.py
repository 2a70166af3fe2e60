"""Fixtures of the end-to-end tests: one built-in dataset cache for every search (the glyphs are
drawn and decoded once, not once per search), and the one real search that several test modules
read without changing it (``shared_search``)."""

from __future__ import annotations

import dataclasses
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import SECRET_VARS
from tests.helpers import SHARED_TRIALS
from tests.helpers import SharedSearch


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``DMLSEARCH_CACHE`` of the end-to-end searches: the built-in data drawn once."""
    return tmp_path_factory.mktemp("shared-cache")


@pytest.fixture(scope="session")
def shared_search(tmp_path_factory: pytest.TempPathFactory,
                  shared_cache: Path) -> Iterator[SharedSearch]:
    root = tmp_path_factory.mktemp("shared-search")
    values = {name: f"sekrit{secrets.token_hex(12)}" for name in SECRET_VARS}
    key_file = root / f"gcp-{secrets.token_hex(8)}.json"  # a path is a secret too
    private_key = f"pk{secrets.token_hex(16)}"
    key_file.write_text(f'{{"type": "service_account", "private_key": "{private_key}"}}\n')
    values["GOOGLE_APPLICATION_CREDENTIALS"] = str(key_file)
    ray_tmp = Path(tempfile.mkdtemp(prefix="ds", dir="/tmp"))  # short: Ray's socket paths
    search = SharedSearch(out=root / "results", root=root, cache=shared_cache, stdout="",
                          outputs=(), export=None, ray_tmp=ray_tmp,  # type: ignore[arg-type]
                          secrets={**values, "private key": private_key})
    try:
        run = search.run("run", "--trials", str(SHARED_TRIALS), "--concurrency", "2", "--out",
                         str(search.out), "--set", "epochs=3", "--set", "embedding_size=32",
                         "--grace-period", "1", "--reduction-factor", "2", "--seed", "3")
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        export = search.run("export", str(search.out), "--top", "2")
        assert export.returncode == 0, export.stderr[-3000:]
        report = search.run("report", str(search.out))
        assert report.returncode == 0, report.stderr[-3000:]
        yield dataclasses.replace(
            search, stdout=run.stdout, export=export,
            outputs=tuple(p.stdout + p.stderr for p in (run, export, report)))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
