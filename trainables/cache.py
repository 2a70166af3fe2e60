"""Where dmlsearch keeps what it makes once and reuses (the built-in datasets, decoded images,
empty stores): ``$DMLSEARCH_CACHE`` if set, else ``~/.cache/dmlsearch``. Torch-free: the search
driver reads it too."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_dir"]

CACHE_ENV = "DMLSEARCH_CACHE"


def cache_dir() -> Path:
    """The cache folder: ``$DMLSEARCH_CACHE`` if set, else ``~/.cache/dmlsearch``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "dmlsearch"
