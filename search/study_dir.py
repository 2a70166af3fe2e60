"""THE results folder of a search (``--out``): every file name in it, its creation and checks,
atomic writes, and the addresses of the stores it holds. No other module knows these names.

```
<out>/
  search.yaml        the resolved options, base settings and code revision (written first)
  optuna.db          the Optuna study, one trial per trained Ray trial (SQLite)
  mlflow.db          the MLflow store (SQLite; unless --mlflow-uri), artifacts in mlartifacts/
  ray/tune/          Ray Tune's experiment: trial folders, results, checkpoints (unless --storage)
  plots/             the study's pictures and the retrained model's views (retrievals.png,
                     hard_pairs.png, retrievals_top.png: the retrieval galleries; for audio
                     trials.png and hard_trials.png: scores, DET curves, hardest trials)
  importance/        fANOVA importance (importance.json, PNGs)
  summary.json       the finished search (record.Summary; written last)
  transfer.json      with --prior-from: the searches it started from, the points it took
  best_config.yaml   the exported best configuration
  report.md          `dmlsearch report`
  ray.log            Ray's own console output and warnings (on the terminal with --verbose)
  export/            `dmlsearch export` (best_config.yaml, best_config-2.yaml, ...)
```

``dmlsearch train --out DIR`` writes its own folder: ``mlflow.db``, ``mlartifacts/``,
``test_metrics.json``, ``seeds.json`` and ``plots/`` (the retrained model's views).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from dmlsearch.trainables.errors import UserError

__all__ = ["ComparisonDir", "StudyDir", "atomic_path", "default_out", "write_atomic"]

SEARCH_YAML = "search.yaml"
SUMMARY_JSON = "summary.json"
OPTUNA_DB = "optuna.db"
MLFLOW_DB = "mlflow.db"
MLARTIFACTS = "mlartifacts"
RAY_DIR = "ray"
TUNE_EXPERIMENT = "tune"
PLOTS_DIR = "plots"
IMPORTANCE_DIR = "importance"
IMPORTANCE_JSON = "importance.json"
REPORT_MD = "report.md"
RAY_LOG = "ray.log"
BEST_CONFIG = "best_config.yaml"
TRANSFER_JSON = "transfer.json"
EXPORT_DIR = "export"
TEST_METRICS_JSON = "test_metrics.json"
SEEDS_JSON = "seeds.json"
EMBEDDINGS_PNG = "test_embeddings_2d.png"
RETRIEVALS_PNG = "retrievals.png"
HARD_PAIRS_PNG = "hard_pairs.png"
RETRIEVALS_TOP_PNG = "retrievals_top.png"
TRIALS_PNG = "trials.png"
HARD_TRIALS_PNG = "hard_trials.png"
COMPARE_YAML = "compare.yaml"
COMPARISON_JSON = "comparison.json"
COMPARISON_MD = "comparison.md"
COMPARISON_METRIC_PNG = "comparison_metric.png"
COMPARISON_BUDGET_PNG = "comparison_budget.png"


def default_out(prefix: str) -> Path:
    """A new folder here: ``dmlsearch-<prefix>-<date>-<time>``."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path.cwd() / f"dmlsearch-{Path(prefix).stem}-{stamp}"


@dataclasses.dataclass(frozen=True)
class StudyDir:
    """A results folder; ``storage`` is ``--storage`` (where Ray Tune keeps trials), if given."""

    path: Path
    storage: str | None = None

    # ---- making one -------------------------------------------------------------------------
    @classmethod
    def create(cls, out: Path | str | None, *, prefix: str,
               storage: str | None = None) -> tuple[StudyDir, bool]:
        """The results folder, made and checked writable and empty (a user error if ``out`` is
        a file, holds files, or cannot be written); and whether this call created it."""
        path = Path(out or default_out(prefix)).expanduser().resolve()  # '~/x' too
        if path.exists() and not path.is_dir():
            raise UserError(f"--out {path} is a file; give a new or empty folder for the results")
        if path.is_dir() and any(path.iterdir()):
            raise UserError(f"--out {path} already holds files; give a new or empty folder")
        created = not path.exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            if created:
                shutil.rmtree(path, ignore_errors=True)
            raise UserError(f"cannot write the results folder {path} ({exc.strerror or exc}); "
                            "choose a writable --out") from None
        return cls(path, storage), created

    def discard(self, *, created: bool) -> None:
        """Undo :meth:`create` after a failed set-up: remove the folder this search created, or
        empty the user's own (it was empty)."""
        if created:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        for item in self.path.iterdir():
            if item.is_dir():
                shutil.rmtree(item, ignore_errors=True)
            else:
                item.unlink(missing_ok=True)

    # ---- what is in it ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The study's name: the Optuna study, the MLflow experiment and the registered model
        are named after the folder."""
        return self.path.name

    search_yaml = property(lambda self: self.path / SEARCH_YAML)
    summary_json = property(lambda self: self.path / SUMMARY_JSON)
    optuna_db = property(lambda self: self.path / OPTUNA_DB)
    mlflow_db = property(lambda self: self.path / MLFLOW_DB)
    artifacts = property(lambda self: self.path / MLARTIFACTS)
    plots = property(lambda self: self.path / PLOTS_DIR)
    importance = property(lambda self: self.path / IMPORTANCE_DIR)
    importance_json = property(lambda self: self.path / IMPORTANCE_DIR / IMPORTANCE_JSON)
    report_md = property(lambda self: self.path / REPORT_MD)
    ray_log = property(lambda self: self.path / RAY_LOG)
    best_config = property(lambda self: self.path / BEST_CONFIG)
    transfer_json = property(lambda self: self.path / TRANSFER_JSON)
    export_file = property(lambda self: self.path / EXPORT_DIR / BEST_CONFIG)
    test_metrics_json = property(lambda self: self.path / TEST_METRICS_JSON)
    seeds_json = property(lambda self: self.path / SEEDS_JSON)
    embeddings_png = property(lambda self: self.path / PLOTS_DIR / EMBEDDINGS_PNG)
    retrievals_png = property(lambda self: self.path / PLOTS_DIR / RETRIEVALS_PNG)
    trials_png = property(lambda self: self.path / PLOTS_DIR / TRIALS_PNG)
    hard_pairs_png = property(lambda self: self.path / PLOTS_DIR / HARD_PAIRS_PNG)
    retrievals_top_png = property(lambda self: self.path / PLOTS_DIR / RETRIEVALS_TOP_PNG)
    hard_trials_png = property(lambda self: self.path / PLOTS_DIR / HARD_TRIALS_PNG)

    @property
    def optuna_url(self) -> str:
        return f"sqlite:///{self.optuna_db}"

    @property
    def default_tracking_uri(self) -> str:
        return f"sqlite:///{self.mlflow_db}"

    @property
    def ray_storage(self) -> Path | str:
        """Ray Tune's ``storage_path``: ``<out>/ray``, or this search's own folder in the
        storage every node shares (``--storage``): a URI as is, a local path made absolute (trials
        on other nodes resolve it the same way)."""
        if self.storage is None:
            return self.path / RAY_DIR
        if "://" in self.storage:
            return f"{self.storage.rstrip('/')}/{self.name}"
        return Path(self.storage).expanduser().resolve() / self.name

    @property
    def tune_experiment(self) -> Path | str:
        """Where Ray Tune keeps the search's experiment state (``<ray_storage>/tune``)."""
        storage = self.ray_storage
        if isinstance(storage, str):
            return f"{storage}/{TUNE_EXPERIMENT}"
        return storage / TUNE_EXPERIMENT

    def ray_trial_folders(self) -> list[Path]:
        """The trial folders Ray Tune wrote (a bucket, s3:// or gs://, is not read from here)."""
        experiment = self.tune_experiment
        if isinstance(experiment, str) or not experiment.is_dir():
            return []
        return sorted(p for p in experiment.iterdir() if (p / "result.json").is_file())

    # ---- search.yaml ----------------------------------------------------------------------------
    def write_resolved(self, resolved: dict[str, Any]) -> None:
        write_atomic(self.search_yaml, yaml.safe_dump(resolved, sort_keys=False))

    def read_resolved(self) -> dict[str, Any]:
        """``search.yaml`` as written by ``run`` ({} when missing or unreadable)."""
        try:
            body = yaml.safe_load(self.search_yaml.read_text())
        except (OSError, yaml.YAMLError):
            return {}
        return body if isinstance(body, dict) else {}

    @classmethod
    def of_search(cls, folder: Path | str) -> StudyDir:
        """An existing search's folder, with the ``--storage`` it was run with."""
        path = Path(folder).expanduser().resolve()
        storage = (cls(path).read_resolved().get("options") or {}).get("storage")
        return cls(path, storage if isinstance(storage, str) and storage.strip() else None)


class ComparisonDir(StudyDir):
    """The results folder of ``dmlsearch compare``: the stores and Ray's experiment are shared
    by the methods, each of which has a search's results folder of its own inside::

        <out>/
          compare.yaml      the resolved options, methods, shared settings (written first)
          mlflow.db         one MLflow store: the comparison's run, each method's study nested
          ray/tune/         one Ray Tune experiment: every method's trials
          ray.log           Ray's own output
          <method>/         a search's results folder (search.yaml, optuna.db, plots/,
                            importance/, summary.json, best_config.yaml), per method
          comparison.json   the statistics (written last); comparison.md the report
          plots/            comparison_metric.png (test metric per method), comparison_budget.png
                            (best-so-far validation score against epochs, per method)
    """

    compare_yaml = property(lambda self: self.path / COMPARE_YAML)
    comparison_json = property(lambda self: self.path / COMPARISON_JSON)
    comparison_md = property(lambda self: self.path / COMPARISON_MD)
    metric_png = property(lambda self: self.path / PLOTS_DIR / COMPARISON_METRIC_PNG)
    budget_png = property(lambda self: self.path / PLOTS_DIR / COMPARISON_BUDGET_PNG)

    def method(self, name: str) -> StudyDir:
        """A method's own results folder (its name made safe for a folder)."""
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".")
        return StudyDir(self.path / (safe or "method"))

    def write_resolved(self, resolved: dict[str, Any]) -> None:
        write_atomic(self.compare_yaml, yaml.safe_dump(resolved, sort_keys=False))

    def read_resolved(self) -> dict[str, Any]:
        try:
            body = yaml.safe_load(self.compare_yaml.read_text())
        except (OSError, yaml.YAMLError):
            return {}
        return body if isinstance(body, dict) else {}

    @classmethod
    def of_comparison(cls, folder: Path | str) -> ComparisonDir:
        path = Path(folder).expanduser().resolve()
        storage = (cls(path).read_resolved().get("options") or {}).get("storage")
        return cls(path, storage if isinstance(storage, str) and storage.strip() else None)


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
