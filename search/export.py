"""The exported configuration: a self-contained YAML that ``dmlsearch train`` consumes.

Written atomically (temp file, then rename), loaded safely (``yaml.safe_load``), and checked:
unknown top-level keys or a config that does not validate are user errors.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from trainables.errors import UserError

__all__ = ["EXPORT_FORMAT", "write_export", "read_export", "write_atomic"]

EXPORT_FORMAT = 1
_KEYS = {"dmlsearch_export", "config", "provenance"}
_HEADER = """\
# A configuration exported by dmlsearch. Train it on all training classes and evaluate it once on
# the test classes with:   dmlsearch train {name}
# `config` holds every resolved setting (edit with care: unknown keys are rejected);
# `provenance` records where it came from and is not read by `train`.
"""


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers never see a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_export(path: Path, *, config: Mapping[str, Any], provenance: Mapping[str, Any]) -> None:
    body = {"dmlsearch_export": EXPORT_FORMAT, "config": dict(config),
            "provenance": dict(provenance)}
    text = _HEADER.format(name=path.name) + yaml.safe_dump(body, sort_keys=False, allow_unicode=True)
    write_atomic(path, text)


def read_export(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (config, provenance); every problem is a one-line :class:`UserError`."""
    if not path.is_file():
        raise UserError(f"exported configuration {str(path)!r} does not exist; "
                        "give the path of a file written by `dmlsearch run` (best_config.yaml)")
    try:
        body = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"{path}: not valid YAML{where}; re-export it with `dmlsearch run`"
                        ) from None
    if not isinstance(body, dict) or "config" not in body:
        raise UserError(f"{path}: expected a mapping with `config:` (a dmlsearch export), got "
                        f"{type(body).__name__}")
    unknown = sorted(set(body) - _KEYS)
    if unknown:
        raise UserError(f"{path}: unknown top-level keys {unknown}; expected only "
                        f"{sorted(_KEYS)}")
    if body.get("dmlsearch_export") != EXPORT_FORMAT:
        raise UserError(f"{path}: dmlsearch_export must be {EXPORT_FORMAT}, got "
                        f"{body.get('dmlsearch_export')!r}")
    config, provenance = body["config"], body.get("provenance") or {}
    if not isinstance(config, dict):
        raise UserError(f"{path}: `config` must be a mapping of settings, got "
                        f"{type(config).__name__}")
    return config, provenance
