"""A small on-disk cache for generated image sets (one ``.npz`` per set).

Files live in ``$DMLSEARCH_CACHE`` if set, else ``~/.cache/dmlsearch/``. Each file stores a
fingerprint of what produced it; a file that cannot be read, has the wrong contents or another
fingerprint is treated as absent and rebuilt. Writes go to a temporary file in the same folder
and are moved into place with ``os.replace``, so parallel workers building the same set never
see a half-written file.
"""

from __future__ import annotations

import logging
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch

from dmlsearch.trainables.cache import cache_dir
from dmlsearch.trainables.data._imageset import ImageSet

__all__ = ["cache_dir", "load_cached", "save_cached"]

logger = logging.getLogger(__name__)



def load_cached(path: Path, *, fingerprint: str) -> ImageSet | None:
    """The image set stored at ``path``, or ``None`` when absent, unreadable or stale."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            if str(stored["fingerprint"]) != fingerprint:
                logger.info("cache %s is stale (other fingerprint): rebuilding", path)
                return None
            images = torch.from_numpy(np.ascontiguousarray(stored["images"]))
            return ImageSet(
                images=images,
                labels=stored["labels"].astype(np.int64),
                class_names=tuple(str(n) for n in stored["class_names"]),
            )
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        logger.warning("cache %s is unreadable (%s): rebuilding", path, exc)
        return None


def save_cached(path: Path, images: ImageSet, *, fingerprint: str) -> None:
    """Store ``images`` at ``path`` atomically; a cache that cannot be written only logs."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        logger.warning("cannot write cache %s (%s): continuing without it", path, exc)
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez_compressed(
                handle,
                images=images.images.numpy(),
                labels=images.labels,
                class_names=np.asarray(images.class_names, dtype=np.str_),
                fingerprint=np.asarray(fingerprint),
            )
        os.chmod(tmp_name, 0o644)  # mkstemp makes it private; a cache may be shared
        os.replace(tmp_name, path)
    except OSError as exc:
        logger.warning("cannot write cache %s (%s): continuing without it", path, exc)
        Path(tmp_name).unlink(missing_ok=True)
    else:
        logger.info("cached %s", path)
