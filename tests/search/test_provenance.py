"""Where a result came from: the checkout's git revision (``+dirty`` with local changes), or the
package version outside a checkout; the digest of the code that trains."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dmlsearch.search import provenance
from tests.helpers import REPO


def test_the_revision_of_this_checkout() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout (an installed copy): the version stands in")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert re.fullmatch(re.escape(head) + r"(\+dirty)?", provenance.code_revision())


def test_outside_a_checkout_the_version_stands_in(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_git(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    assert provenance.code_revision() == f"dmlsearch {provenance.package_version()}"
    assert provenance.package_version() != "unknown"  # installed: the README's install


def test_the_training_codes_digest_follows_the_files_that_train(tmp_path: Path) -> None:
    package = tmp_path / "trainables"
    (package / "losses").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "losses" / "ms.py").write_text("margin = 0.5\n")
    loop = tmp_path / "curve.py"
    loop.write_text("epochs = 3\n")
    first = provenance.source_digest(package, loop)
    assert re.fullmatch("[0-9a-f]{16}", first)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.py").write_text("compiled")  # caches do not count
    (package / "notes.txt").write_text("not code")
    assert provenance.source_digest(package, loop) == first
    (package / "losses" / "ms.py").write_text("margin = 0.1\n")  # a default changed
    changed = provenance.source_digest(package, loop)
    assert changed != first
    (package / "losses" / "ms.py").rename(package / "ms.py")  # the same text elsewhere
    assert provenance.source_digest(package, loop) not in (first, changed)
    moved = provenance.source_digest(package, loop)
    loop.write_text("epochs = 4\n")  # the recorder's epoch loop counts too
    assert provenance.source_digest(package, loop) != moved
    # the installed package's own digest: stable, and the same as the function's parts
    root = Path(provenance.__file__).resolve().parents[1]  # this checkout (editable install)
    assert provenance.training_code() == provenance.source_digest(
        root / "trainables", root / "search" / "replay" / "curve.py")
    copy = tmp_path / "copy" / "trainables"
    shutil.copytree(package, copy)
    assert provenance.source_digest(copy, loop) == provenance.source_digest(package, loop)
