"""The exported configuration: a self-contained YAML that ``dmlsearch train`` consumes.

Written atomically (temp file, then rename), loaded safely (``yaml.safe_load``), and checked:
unknown top-level keys or a config that does not validate are user errors.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from dmlsearch.search.results import load_results
from dmlsearch.search.results import ranked
from dmlsearch.trainables.errors import UserError

__all__ = ["EXPORT_FORMAT", "atomic_path", "export_study", "read_export", "validation_epochs",
           "write_atomic", "write_export"]

EXPORT_FORMAT = 1
_KEYS = {"dmlsearch_export", "config", "provenance"}
_HEADER = """\
# A configuration exported by dmlsearch. Train it on all training classes and evaluate it once on
# the test classes with:   dmlsearch train {name}
# `config` holds every resolved setting (edit with care: unknown keys are rejected);
# `provenance` records where it came from and is not read by `train`.
"""


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` to ``path`` so that readers never see a half-written file: a temporary
    file in the same folder, flushed to disk, then renamed over ``path``. If anything fails, the
    old file (if any) is left as it was and no temporary file remains."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(text.encode() if isinstance(text, str) else text)
            handle.flush()
            os.fsync(handle.fileno())


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix, so e.g. ``savefig`` picks the format) to
    write; renamed over ``path`` when the block ends without an error, removed otherwise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}",
                                dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        # mkstemp makes the file private (0600); give it the old file's mode, or rw-r--r--
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
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


# -- `dmlsearch export`: the best trial(s) of a results folder -----------------------------------

_PATH_SETTINGS = ("data_root", "pretrained")  # the only settings that may hold a (user's) path
_SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD", re.IGNORECASE)
_ABSOLUTE = re.compile(r"^(/|~|[A-Za-z]:[\\/]|\\\\)")


def validation_epochs(flat: Mapping[str, Any], best_epoch: Any) -> dict[str, Any]:
    """``flat`` to train on all training classes: no validation classes remain, so the training
    length is the one validation chose (the trial's best epoch; its own epochs without one)."""
    from dmlsearch.trainables.config import TrialConfig

    epochs = int(best_epoch or flat.get("epochs") or TrialConfig().epochs)
    return {**flat, "epochs": max(1, epochs)}


def _secrets() -> set[str]:
    return {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and v}


def _check_values(value: Any, where: str, secrets: set[str]) -> None:
    """Refuse a credential from the environment or a path anywhere but data_root/pretrained."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_values(v, f"{where}.{k}" if where else str(k), secrets)
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_values(v, f"{where}[{i}]", secrets)
        return
    if not isinstance(value, str):
        return
    if value in secrets or any(len(s) >= 8 and s in value for s in secrets):
        raise UserError(f"refusing to export: {where} holds the value of a secret environment "
                        "variable (a name with KEY, SECRET, TOKEN or PASSWORD)")
    if where.removeprefix("config.") not in _PATH_SETTINGS and _ABSOLUTE.match(value):
        raise UserError(f"refusing to export: {where} holds a path ({value!r}); only "
                        f"{' and '.join(_PATH_SETTINGS)} may")


def _numbered(path: Path, rank: int) -> Path:
    return path if rank == 1 else path.with_name(f"{path.stem}-{rank}{path.suffix}")


def export_study(results: Path, *, top: int = 1, out: Path | None = None) -> list[Path]:
    """Write the ``top`` best trials of a results folder as files ``dmlsearch train`` reads:
    ``out`` (default ``results/export/best_config.yaml``) for the best, ``out-2``… for the rest.
    Epochs are the trial's best validation epoch, as the search's retrain does."""
    from dmlsearch.search.provenance import package_version
    from dmlsearch.spaces import config_from_sample
    from dmlsearch.trainables.config import TrialConfig

    if top < 1:
        raise UserError(f"--top must be at least 1, got {top}")
    loaded = load_results(results)
    best_first = [t for t in ranked(loaded) if isinstance(t.get("config"), dict)]
    if not best_first:
        raise UserError(f"no trial with a validation score in {loaded.dir}; nothing to export")
    metric = loaded.metric
    out = Path(out) if out is not None else loaded.dir / "export" / "best_config.yaml"
    revision = loaded.resolved.get("code_revision")
    secrets = _secrets()
    documents = []
    for rank, trial in enumerate(best_first[:top], start=1):
        try:
            flat = config_from_sample(trial["config"])
        except ValueError as exc:
            raise UserError(f"trial {trial.get('trial_id')}: {exc}") from None
        best_epoch = trial.get("best_epoch")
        config = TrialConfig.from_flat(validation_epochs(flat, best_epoch)).to_flat()
        provenance = {
            "study": loaded.dir.name, "trial_id": str(trial.get("trial_id")),
            "rank": rank, "trial_state": trial.get("state"),
            "validation": {"metric": metric, "value": trial["score"], "best_epoch": best_epoch},
            "epochs_note": "epochs = the trial's best validation epoch (as the search's retrain)",
            "code_revision": revision, "dmlsearch": package_version(),
        }
        _check_values({"config": config, "provenance": provenance}, "", secrets)
        documents.append((_numbered(out, rank), config, provenance))
    written = []
    for path, config, provenance in documents:
        try:
            write_export(path, config=config, provenance=provenance)
        except OSError as exc:
            raise UserError(f"cannot write {path} ({exc.strerror or exc}); choose a writable "
                            "--out") from None
        written.append(path)
    return written
