"""Where a result came from: the checkout's git revision (``+dirty`` with local changes), or the
package version outside a checkout."""

from __future__ import annotations

import re
import subprocess

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
