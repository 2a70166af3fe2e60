"""Everything MLflow: the one module that talks to the tracking store.

Layout in the store: one experiment per study; a parent run for the search (its settings,
the summary, the exported configuration); one child run per trial (parameters, per-epoch
metrics, final state and the reason of a failure); a retrain run linked to the parent (test
metrics). Logging happens on the driver only: workers need no route to the tracking server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import time
import urllib.parse
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from mlflow.entities import Dataset
from mlflow.entities import DatasetInput
from mlflow.entities import InputTag
from mlflow.entities import Metric
from mlflow.entities import Param
from mlflow.models import ModelSignature
from mlflow.tracking import MlflowClient
from mlflow.types import Schema
from mlflow.types import TensorSpec

from dmlsearch.search.results import Summary
from dmlsearch.search.results import scores_only
from dmlsearch.search.store_templates import seed_store
from dmlsearch.search.tune.study import trial_name
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.input_kinds import DEFAULT_KIND
from dmlsearch.trainables.input_kinds import input_kind

__all__ = ["EXPERIMENT_KEY", "Tracker", "browse_command", "browse_urls", "experiment_for",
           "log_to_study", "metric_name", "model_name", "study_metrics", "trial_run_name"]

log = logging.getLogger(__name__)
logging.getLogger("alembic").setLevel(logging.WARNING)

_TRIAL_METRICS_SKIP = {"trial_finished", "fold", "epoch", "done", "training_iteration",
                       "timestamp", "time_this_iter_s", "time_since_restore",
                       "iterations_since_restore", "pid", "checkpoint_dir_name"}


#: Where a results folder records the MLflow experiment its runs went to (search.yaml,
#: compare.yaml), so a resume finds them whatever its own environment says.
EXPERIMENT_KEY = "mlflow_experiment"


def experiment_for(folder_name: str) -> tuple[str, bool]:
    """The MLflow experiment a new search writes to, and whether it is the user's: MLflow's
    convention ``MLFLOW_EXPERIMENT_NAME`` when set (several searches side by side in one
    experiment, told apart by their study runs), else one experiment per results folder, named
    after it."""
    named = os.environ.get("MLFLOW_EXPERIMENT_NAME") or None
    return (named, True) if named else (folder_name, False)


#: What follows a pruned trial's name in its run name (``t02 (pruned) lr=...``): the MLflow UI
#: shows a run stopped early by the scheduler as "Finished", like one that trained to its end,
#: and its run-name column cuts long names, so the mark comes first.
PRUNED_MARK = " (pruned)"


def metric_name(name: str) -> str:
    """MLflow allows letters, digits and ``_-. /:`` in metric names: ``recall@1`` →
    ``recall_at_1``."""
    return re.sub(r"[^\w.\- /:]", "_", name.replace("@", "_at_"))


def trial_run_name(trial_id: str, config: Mapping[str, Any], searched: Sequence[str]) -> str:
    """A trial run's name that tells it apart: the trial's one name (``t07``: its Optuna trial
    number, as the terminal and the report say it) and its searched values, the loss first,
    e.g. ``t07 proxy_anchor lr=2.5e-03 loss.alpha=32``."""
    parts = [trial_name(trial_id)]
    keys = sorted(searched, key=lambda k: k != "loss")
    for key in keys:
        if key not in config:
            continue
        value = config[key]
        if key == "loss":
            parts.append(str(value))
        elif isinstance(value, float):
            parts.append(f"{key}={value:.1e}" if value and abs(value) < 1e-2 else
                         f"{key}={value:.3g}")
        else:
            parts.append(f"{key}={value}")
    return " ".join(parts)


def model_name(study: str) -> str:
    """The Model Registry name of a study's retrained model: ``dmlsearch-<study>`` (once)."""
    return study if study.startswith("dmlsearch-") else f"dmlsearch-{study}"


def study_metrics(summary: Summary) -> dict[str, float]:
    """The study run's metrics: trial counts, budget, best validation score, test metrics."""
    metrics: dict[str, float] = {f"trials_{state}": float(n)
                                 for state, n in summary.counts().items()}
    if summary.budget is not None:
        metrics["epochs_trained"] = float(summary.budget.epochs)
        metrics.update({f"budget_{k}": float(v)
                        for k, v in dataclasses.asdict(summary.budget).items()})
    metrics["repeats_answered"] = float(summary.repeats_answered)
    metrics["seconds"] = float(summary.seconds or 0.0)
    best = summary.trial(summary.best_trial)
    if best is not None and best.score is not None:  # the headline: columns of the runs table
        metrics["best_val_score"] = best.score
        metrics[f"best_val_{summary.study.metric}"] = best.score
    if summary.test_metrics is not None:
        metrics.update({f"test_{k}": v for k, v in scores_only(summary.test_metrics).items()})
    if summary.retrains:
        metrics.update({f"test_mean_{k}": v for k, v in summary.retrains[0].mean.items()})
    if summary.retrains and len(summary.retrains[0].seeds) > 1:
        metrics.update({f"test_ci95_{k}": v for k, v in summary.retrains[0].ci95.items()})
    if summary.fold_ensemble is not None:
        metrics.update({f"test_{k}": v
                        for k, v in scores_only(summary.fold_ensemble.metrics).items()})
    return metrics


def browse_command(uri: str) -> str:
    return f"mlflow ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000"


def browse_urls(uri: str, experiment_id: str, mode: str) -> tuple[str, str]:
    """Where the study opens in the MLflow UI: its runs in the "Model training" view (MLflow 3
    opens an experiment on its GenAI overview otherwise), and its trials alone, best first."""
    base = uri.rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    runs = f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
    trials = runs + "&" + urllib.parse.urlencode({
        "searchFilter": "tags.`dmlsearch.kind` = 'trial'", "orderByKey": "metrics.`score`",
        "orderByAsc": "true" if mode == "min" else "false"})
    return runs, trials


def log_to_study(uri: str, experiment: str, folder: Path) -> bool:
    """Log ``folder`` to the study run of ``experiment``; False when there is none."""
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return False
    runs = client.search_runs([found.experiment_id],
                              filter_string="tags.`dmlsearch.kind` = 'study'", max_results=1)
    if not runs:
        return False
    client.log_artifacts(runs[0].info.run_id, str(folder), artifact_path=folder.name)
    return True


_QUICK = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


@contextlib.contextmanager
def _fluent_store(uri: str) -> Iterator[None]:
    """MLflow's fluent calls (``log_model`` has no client form) write to ``uri`` inside the block
    only. ``mlflow.set_tracking_uri`` also exports ``MLFLOW_TRACKING_URI``, which the next search
    in this process (the Python API, a notebook) would read as the user's choice of store: both
    the global and the variable are put back as they were."""
    import mlflow
    from mlflow.tracking import _tracking_service

    before, exported = _tracking_service.utils._tracking_uri, os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)
        if exported is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = exported


@contextlib.contextmanager
def _answer_quickly(uri: str) -> Iterator[None]:
    """For a tracking server: no retries and a 10 s timeout (unless the user set them), and no
    urllib3 retry warnings. MLflow's defaults (7 retries with back-off, 120 s timeouts) keep a
    search on a wrong --mlflow-uri waiting for minutes before it says so."""
    if not uri.startswith(("http://", "https://")):
        yield
        return
    added = [k for k in _QUICK if k not in os.environ]
    os.environ.update({k: _QUICK[k] for k in added})
    urllib3 = logging.getLogger("urllib3")
    level = urllib3.level
    urllib3.setLevel(logging.ERROR)
    try:
        yield
    finally:
        urllib3.setLevel(level)
        for key in added:
            os.environ.pop(key, None)


_NETWORK = ("connection refused", "timed out", "name or service not known",
            "temporary failure in name resolution", "no route to host", "network is unreachable")


def _why(exc: BaseException) -> str:
    """The short reason a store failed: the network's words when there are some."""
    text = str(exc)
    for known in _NETWORK:
        if known in text.lower():
            return known
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


class Tracker:
    """A study's MLflow experiment and runs, driven by search events."""

    def __init__(self, uri: str, experiment: str, *, artifact_location: Path | None = None,
                 method: str | None = None):
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
        self.uri = uri
        seed_store(uri, "mlflow")  # a new SQLite store: copied, not migrated (store_templates)
        self.client = MlflowClient(tracking_uri=uri)
        try:
            with _answer_quickly(uri):  # a server that does not answer fails in seconds
                found = self.client.get_experiment_by_name(experiment)
            if found is None:
                # A tracking server keeps the artifacts it serves (`mlflow server`'s proxied
                # store): only a local store gets them beside the results.
                local = not uri.startswith(("http://", "https://", "databricks"))
                location = (artifact_location.resolve().as_uri()
                            if artifact_location and local else None)
                self.experiment_id = self.client.create_experiment(
                    experiment, artifact_location=location
                )
            else:
                self.experiment_id = found.experiment_id
        except Exception as exc:  # noqa: BLE001 - any store failure is the user's URI
            raise UserError(
                f"the MLflow tracking store {uri!r} did not answer ({_why(exc)}); "
                "check --mlflow-uri or leave it out to use a SQLite file in the results folder"
            ) from None
        self.parent_id: str | None = None
        self.study_open = False  # its study run is started or taken up, and not ended yet
        # A comparison's method: its runs carry the tag, and a resume finds them by it.
        self.method = method
        self._tags = {"dmlsearch.method": method} if method else {}
        self._trial_runs: dict[str, str] = {}
        # How runs are named and which data they show (set by the search; see describe()).
        self._searched: tuple[str, ...] = ()
        self._data: Any = None  # a dmlsearch.search.prepare.DataInfo

    def describe(self, *, searched: Sequence[str], data: Any = None) -> None:
        """What the runs of this search show: trial runs are named after the ``searched``
        settings that tell them apart; each run lists the dataset and the class split it used
        (``data``: a :class:`~dmlsearch.search.prepare.DataInfo`) as MLflow dataset inputs."""
        self._searched, self._data = tuple(searched), data

    def log_study_inputs(self) -> None:
        """The study run's dataset: all training classes and the test classes."""
        if self.parent_id is not None:
            self._log_inputs(self.parent_id, {}, retrain=True)

    def set_note(self, markdown: str, *, run_id: str | None = None) -> None:
        """The run's description in the MLflow UI (default: the study run's)."""
        run = run_id or self.parent_id
        if run is not None:
            self.client.set_tag(run, "mlflow.note.content", markdown[:5000])

    # ---- study ---------------------------------------------------------------------------
    def start_study(self, *, name: str, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        run = self.client.create_run(
            self.experiment_id, run_name=name,
            tags={"dmlsearch.kind": "study", **self._tags, **tags})
        self.parent_id = run.info.run_id
        self.study_open = True
        self._log(self.parent_id, params=params)
        return self.parent_id

    def attach_study(self, kind: str = "study", *, results: Path | str | None = None,
                     reopen: bool = True) -> str:
        """Resume: take up this experiment's study run (``kind``: a comparison's is
        "comparison") and its trial runs (by trial id); a method's own when this tracker has
        one. ``results``: the search's folder, which its study run names (several searches
        can share an experiment); the latest study run when none names it (a moved folder).
        ``reopen``: mark it RUNNING again (not for a comparison's method that finished: its
        run keeps its end)."""
        where = f"tags.`dmlsearch.kind` = '{kind}'" + (self._mine() if kind == "study" else "")
        studies: list[Any] = []
        if results is not None and "'" not in str(results):
            studies = self.client.search_runs(
                [self.experiment_id], filter_string=where
                + f" and tags.`dmlsearch.results` = '{results}'",
                order_by=["attributes.start_time DESC"], max_results=1)
        if not studies:
            studies = self.client.search_runs(
                [self.experiment_id], filter_string=where,
                order_by=["attributes.start_time DESC"], max_results=1)
        if not studies:
            raise UserError(
                f"the MLflow store {self.uri} holds no study run in this search's experiment; "
                "resume with the --mlflow-uri the search used (see search.yaml)"
            )
        self.parent_id = studies[0].info.run_id
        if reopen:
            self.client.update_run(self.parent_id, status="RUNNING")
            self.study_open = True
        for run in self._trial_runs_where():
            self._trial_runs[run.data.tags["dmlsearch.trial_id"]] = run.info.run_id
        return self.parent_id

    def close_dangling(self) -> int:
        """End every trial run still RUNNING (its trial never came back) as KILLED."""
        ours = {run_id: trial_id for trial_id, run_id in self._trial_runs.items()}
        # one query for the open runs, not one lookup per trial (3,000 trials: 16 s)
        running = [run.info.run_id for run in self._trial_runs_where(
            " and attributes.status = 'RUNNING'") if run.info.run_id in ours]
        for run_id in running:
            self.client.set_tag(run_id, "dmlsearch.state", "killed")
            self.client.set_terminated(run_id, status="KILLED")
            log.info("trial %s never finished: its MLflow run ends as KILLED", ours[run_id])
        return len(running)

    def _mine(self) -> str:
        """The filter that keeps a comparison's method's own runs (nothing for a search)."""
        return f" and tags.`dmlsearch.method` = '{self.method}'" if self.method else ""

    def _trial_runs_where(self, condition: str = "") -> Iterator[Any]:
        """This search's trial runs in the experiment (``condition``: `` and ...``), paged."""
        token = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id],
                filter_string="tags.`dmlsearch.kind` = 'trial'" + condition + self._mine()
                + ("" if self.parent_id is None  # a shared experiment: this study's own
                   else f" and tags.`mlflow.parentRunId` = '{self.parent_id}'"),
                max_results=1000, page_token=token)
            yield from page
            token = page.token
            if not token:
                return

    def end_study(self, *, metrics: Mapping[str, float], status: str = "FINISHED") -> None:
        assert self.parent_id is not None
        self._log(self.parent_id, metrics=metrics)
        self.client.set_terminated(self.parent_id, status=status)
        self.study_open = False

    def log_artifact(self, path: Path, *, run_id: str | None = None,
                     artifact_path: str | None = None) -> None:
        run = run_id or self.parent_id
        assert run is not None
        self.client.log_artifact(run, str(path), artifact_path=artifact_path)

    def log_artifacts(self, folder: Path, *, run_id: str | None = None) -> None:
        """``folder`` and its files, under its own name, in the run (default: the study's)."""
        run = run_id or self.parent_id
        assert run is not None
        self.client.log_artifacts(run, str(folder), artifact_path=folder.name)

    # ---- trials (the TrialEvents protocol) ------------------------------------------------
    def trial_started(self, trial_id: str, config: dict[str, Any]) -> None:
        known = self._trial_runs.get(trial_id)
        if known is not None:  # a resumed search continues the trial's own run
            self.client.update_run(known, status="RUNNING")
            self.client.set_tag(known, "dmlsearch.state", "running")
            return
        run = self.client.create_run(
            self.experiment_id,
            run_name=(f"{self.method} " if self.method else "")  # a comparison's method
            + trial_run_name(trial_id, config, self._searched),
            tags={"mlflow.parentRunId": self.parent_id or "", "dmlsearch.kind": "trial",
                  "dmlsearch.trial_id": trial_id, "dmlsearch.state": "running", **self._tags},
        )
        self._trial_runs[trial_id] = run.info.run_id
        self._log(run.info.run_id, params=config)
        self._log_inputs(run.info.run_id, config, retrain=False)

    def trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        run = self._trial_runs.get(trial_id)
        if run is None:
            return
        step = int(result.get("training_iteration", 0))
        metrics = {k: v for k, v in result.items()
                   if k not in _TRIAL_METRICS_SKIP and isinstance(v, (int, float))
                   and not isinstance(v, bool)}
        self._log(run, metrics=metrics, step=step)

    def trial_artifacts(self, trial_id: str, folder: Path) -> None:
        """Files a trial left beside it (the learned distance's diagnostics histograms)."""
        run = self._trial_runs.get(trial_id)
        if run is not None:
            self.client.log_artifacts(run, str(folder), artifact_path=folder.name)

    def trial_finished(self, trial_id: str, state: str, reason: str | None) -> None:
        run = self._trial_runs.get(trial_id)
        if run is None:
            return
        self.client.set_tag(run, "dmlsearch.state", state)
        if reason:
            self.client.set_tag(run, "dmlsearch.failure_reason", reason[:5000])
        if state == "pruned":  # MLflow's statuses have no "stopped early": say so in its name
            name = self.client.get_run(run).info.run_name or ""
            if PRUNED_MARK not in name:
                first, _, rest = name.partition(" ")
                self.client.update_run(run, name=" ".join(
                    part for part in (first + PRUNED_MARK, rest) if part))
        self.client.set_terminated(run, status="FAILED" if state == "failed" else "FINISHED")

    # ---- retrains ---------------------------------------------------------
    def log_retrain(
        self, *, name: str, config: Mapping[str, Any], test_metrics: Mapping[str, float],
        history: list[dict[str, float]], tags: Mapping[str, str],
    ) -> str:
        run_tags = {"dmlsearch.kind": "retrain", **self._tags, **tags}
        if self.parent_id:
            run_tags["mlflow.parentRunId"] = self.parent_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags=run_tags)
        run_id = run.info.run_id
        self._log(run_id, params=config)
        self._log_inputs(run_id, dict(config), retrain=True)
        for row in history:
            step = int(row.get("epoch", 0))
            self._log(run_id, metrics={k: v for k, v in row.items() if k != "epoch"}, step=step)
        self._log(run_id, metrics={f"test_{k}": v for k, v in scores_only(test_metrics).items()})
        counts = {k: v for k, v in test_metrics.items() if k not in scores_only(test_metrics)}
        for key, value in counts.items():  # a set's size, not a score: a tag beside the scores
            self.client.set_tag(run_id, f"dmlsearch.test_{key}", str(int(value)))
        self.client.set_terminated(run_id, status="FINISHED")
        return run_id

    def register_model(self, run_id: str, model: Any, *, name: str, channels: int,
                       size: int | None = None, kind: str = DEFAULT_KIND,
                       description: str = "") -> str:
        """Log ``model`` (an ``EmbeddingNet``) to ``run_id`` as an MLflow PyTorch model that
        takes its items as the evaluation leaves them, and register it as a new version of
        ``name``; the version.

        The input signature is the model input of the input kind ``kind``
        (:class:`~dmlsearch.trainables.input_kinds.ModelInput`), given the items' ``channels``
        and image ``size``: images, uint8 ``[-1, C, H, W]``; audio, float32 features
        ``[-1, channels, -1]`` (any number of frames). The output is the L2-normalised
        embedding ``[-1, D]``.
        """
        import mlflow.pytorch  # torch: only the retrain that registers a model needs it
        import torch

        from dmlsearch.trainables.models import RawImageEmbedder

        served = RawImageEmbedder(model).cpu().eval()
        takes = input_kind(kind).model_input
        dtype = np.dtype(takes.dtype)
        shape, example_shape = takes.shape(channels, size), takes.example_shape(channels, size)
        example = np.zeros(example_shape, dtype=dtype)  # batch > 1: dynamic
        if takes.random_example:  # statistics pooling of a constant is flat
            example = np.random.default_rng(0).standard_normal(example_shape).astype(dtype)
        with torch.no_grad():
            dim = int(served(torch.from_numpy(example)).shape[1])
        # One unnamed tensor: pyfunc (``mlflow models serve``, batch scoring) then passes the
        # array itself; a named one arrives as a dict, which the PyTorch flavour refuses.
        signature = ModelSignature(
            inputs=Schema([TensorSpec(dtype, shape)]),
            outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, dim), name="embedding")]))
        # Requirements are given, not inferred: inference imports the model in a subprocess.
        requirements = [f"torch=={torch.__version__.split('+')[0]}", f"numpy=={np.__version__}"]
        # MLflow's serving check of the example cannot convert 4-D tensors and says so: noise.
        logging.getLogger("mlflow.models.model").setLevel(logging.ERROR)
        with _fluent_store(self.uri):  # registration resolves models:/ through it too
            with mlflow.start_run(run_id=run_id):
                try:  # the exported graph (torch.export): safe to load, needs no dmlsearch code
                    info = mlflow.pytorch.log_model(
                        served, name="model", signature=signature, input_example=example,
                        pip_requirements=requirements, serialization_format="pt2")
                except Exception as exc:  # noqa: BLE001 - a backbone torch.export cannot trace
                    log.warning("torch.export failed (%s: %s); registering the pickled model, "
                                "which needs dmlsearch installed to load", type(exc).__name__, exc)
                    info = mlflow.pytorch.log_model(
                        served, name="model", signature=signature,
                        pip_requirements=requirements, serialization_format="pickle")
            try:
                self.client.get_registered_model(name)
            except mlflow.exceptions.MlflowException:
                self.client.create_registered_model(
                    name, description="embedding models retrained by dmlsearch studies")
            version = self.client.create_model_version(
                name, source=info.model_uri, run_id=run_id, model_id=info.model_id,
                tags={"dmlsearch.run": run_id}, description=description or None)
            self.client.set_tag(run_id, "dmlsearch.registered_model", f"{name}/{version.version}")
        return str(version.version)

    # ---- helpers -------------------------------------------------------------------------
    def _log_inputs(self, run_id: str, config: dict[str, Any], *, retrain: bool) -> None:
        """The run's dataset and class split as MLflow dataset inputs: one per class set
        (training, validation or test), named after the dataset, with a digest of its class
        list (two runs with the same digest used the same classes)."""
        if self._data is None or config.get("dataset", self._data.name) != self._data.name:
            return
        inputs = []
        for context, description, classes in self._data.inputs(config, retrain=retrain):
            digest = hashlib.sha256("\n".join(classes).encode()).hexdigest()[:8]
            profile = json.dumps({"classes": len(classes), "split": description})
            inputs.append(DatasetInput(
                dataset=Dataset(name=self._data.name, digest=digest, source_type="local",
                                source=json.dumps({"uri": self._data.source}),
                                schema=json.dumps({"classes": classes[:1000]}),
                                profile=profile),
                tags=[InputTag(key="mlflow.data.context", value=context)]))
        try:
            self.client.log_inputs(run_id, datasets=inputs)
        except Exception as exc:  # noqa: BLE001 - what the runs show is best effort
            log.warning("could not log the dataset of run %s: %s", run_id, exc)

    def _log(
        self, run_id: str, *, params: Mapping[str, Any] | None = None,
        metrics: Mapping[str, float] | None = None, step: int = 0,
    ) -> None:
        now = int(time.time() * 1000)
        batch_params = [Param(k, _param_value(v)) for k, v in (params or {}).items()]
        batch_metrics = [Metric(metric_name(k), float(v), now, step)
                         for k, v in (metrics or {}).items() if math.isfinite(float(v))]
        for i in range(0, max(len(batch_params), len(batch_metrics)), 100):
            self.client.log_batch(run_id, metrics=batch_metrics[i : i + 100],
                                  params=batch_params[i : i + 100])


def _param_value(value: Any) -> str:
    text = "None" if value is None else str(value)
    return text[:6000]
