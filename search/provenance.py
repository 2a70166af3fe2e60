"""Where a result came from: the code revision, the package version, and a digest of the code
that trains (what a learning-curve table's trainings depend on)."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["code_revision", "package_version", "training_code"]


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


@functools.cache
def training_code() -> str:
    """A digest (SHA-256, 16 hex digits) of the source that decides what a training does: every
    ``.py`` file of ``dmlsearch.trainables`` and the recorder's epoch loop
    (``search/replay/curve.py``), by path and content. Two revisions with the same digest train
    alike; any edit there, a comment included, changes it. Read from the installed files, so it
    needs no git checkout."""
    from importlib.util import find_spec

    def folder(package: str) -> Path:  # found, not imported (no torch)
        spec = find_spec(package)
        assert spec is not None and spec.submodule_search_locations
        return Path(next(iter(spec.submodule_search_locations))).resolve()

    return source_digest(folder("dmlsearch.trainables"),
                         folder("dmlsearch.search.replay") / "curve.py")


def source_digest(package: Path, *files: Path) -> str:
    """SHA-256 (16 hex digits) of every ``.py`` file under ``package`` (by its path there) and
    of ``files`` (by name), contents included; caches (``__pycache__``) left out."""
    named = sorted((f"{package.name}/{p.relative_to(package).as_posix()}", p)
                   for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for name, path in [*named, *((f.name, f) for f in files)]:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
