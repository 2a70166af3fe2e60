"""Where a result came from: the code revision and the package version."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["code_revision", "package_version"]


def package_version() -> str:
    try:
        return metadata.version("dmlsearch")
    except metadata.PackageNotFoundError:
        return "unknown"


def code_revision() -> str:
    """``<git sha>[+dirty]`` of the source checkout when there is one, else the version."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
            timeout=10, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"dmlsearch {package_version()}"
    return sha + ("+dirty" if dirty else "") if sha else f"dmlsearch {package_version()}"
