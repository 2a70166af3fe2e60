"""The exported configuration: a self-contained YAML that ``dmlsearch train`` consumes, written
for the search's best trial when it finishes and by ``dmlsearch export`` for the top trials.

Written atomically (temp file, then rename), loaded safely (``yaml.safe_load``), and checked:
unknown top-level keys or a config that does not validate are user errors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from dmlsearch.search.finish.retrain_runs import EnsembleOutcome
from dmlsearch.search.finish.retrain_runs import RetrainOutcome
from dmlsearch.search.finish.retrain_runs import retrain_config
from dmlsearch.search.options import ExportOptions
from dmlsearch.search.provenance import package_version
from dmlsearch.search.readback import load_summary
from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import rank
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.spaces import Space
from dmlsearch.trainables.config import SETTINGS
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.setting_kinds import of_kind

__all__ = ["EXPORT_FORMAT", "export_best", "export_study", "read_export", "write_export"]

EXPORT_FORMAT = 1
_KEYS = {"dmlsearch_export", "config", "provenance"}
_HEADER = """\
# A configuration exported by dmlsearch. Train it on all training classes and evaluate it once on
# the test classes with:   dmlsearch train {name}
# `config` holds every resolved setting of its input kind (edit with care: unknown keys, and
# settings of another input kind, are rejected);
# `provenance` records where it came from and is not read by `train`.
"""


def write_export(path: Path, *, config: Mapping[str, Any], provenance: Mapping[str, Any]) -> None:
    """``config`` (its input kind's settings only) and ``provenance``, as ``train`` reads them."""
    body = {"dmlsearch_export": EXPORT_FORMAT, "config": of_kind(config),
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

#: The settings that may hold a path (as declared); a path anywhere else is refused.
_PATH_SETTINGS = tuple(name for name, setting in SETTINGS.items() if setting.path)
_SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD", re.IGNORECASE)
_ABSOLUTE = re.compile(r"^(/|~|[A-Za-z]:[\\/]|\\\\)")


def export_best(path: Path, *, best: TrialRecord, retrain: RetrainOutcome, study: str,
                space: Space, metric: str, revision: str,
                ensemble: EnsembleOutcome | None = None) -> Path:
    """The finished search's best configuration as it was retrained, with its provenance."""
    write_export(path, config=retrain.config, provenance={
        "study": study, "space": space.name, "space_source": space.source,
        "trial_id": best.trial_id,
        "validation": {"metric": metric, "value": best.score, "best_epoch": best.best_epoch},
        "epochs_note": "epochs = the best trial's best validation epoch",
        "test_metrics": retrain.test_metrics, "code_revision": revision,
        "dmlsearch": package_version(),
        **({"registered_model": retrain.registered} if retrain.registered else {}),
        **({"fold_ensemble_test_metrics": ensemble.metrics} if ensemble else {}),
    })
    return path


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
                        f"{', '.join(_PATH_SETTINGS)} may")


def _numbered(path: Path, place: int) -> Path:
    return path if place == 1 else path.with_name(f"{path.stem}-{place}{path.suffix}")


def export_study(results: Path, *, top: int = 1, out: Path | None = None) -> list[Path]:
    """Write the ``top`` best trials of a results folder as files ``dmlsearch train`` reads:
    ``out`` (default ``results/export/best_config.yaml``) for the best, ``out-2``… for the rest.
    Epochs are the trial's best validation epoch and threads the retrain's, as the search's
    retrain trained them."""
    ExportOptions(results=Path(results), top=top, out=out).check()  # as the command line's
    study_dir, summary = load_summary(results)
    best_first = rank(summary.trials, summary.study.mode)
    if not best_first:
        raise UserError(f"no trial with a validation score in {study_dir.path}; nothing to export")
    out = Path(out) if out is not None else study_dir.export_file
    revision = study_dir.read_resolved().get("code_revision")
    secrets = _secrets()
    documents = []
    for place, trial in enumerate(best_first[:top], start=1):
        flat = retrain_config(trial)
        if summary.study.retrain_threads:  # the search chose the count: its retrain's
            flat["threads"] = summary.study.retrain_threads
        config = TrialConfig.from_flat(flat).to_flat()
        provenance = {
            "study": study_dir.name, "trial_id": trial.trial_id,
            "rank": place, "trial_state": trial.state.value,
            "validation": {"metric": summary.study.metric, "value": trial.score,
                           "best_epoch": trial.best_epoch},
            "epochs_note": "epochs = the trial's best validation epoch (as the search's retrain)",
            "code_revision": revision, "dmlsearch": package_version(),
        }
        _check_values({"config": config, "provenance": provenance}, "", secrets)
        documents.append((_numbered(out, place), config, provenance))
    written = []
    for path, config, provenance in documents:
        try:
            write_export(path, config=config, provenance=provenance)
        except OSError as exc:
            raise UserError(f"cannot write {path} ({exc.strerror or exc}); choose a writable "
                            "--out") from None
        written.append(path)
    return written
