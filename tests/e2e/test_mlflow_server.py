"""A tiny search logged to a real ``mlflow server`` on 127.0.0.1, checked through MLflow's REST
API as the UI reads it: the study → trials → retrain tree, per-epoch metrics, the plots and the
exported configuration as artifacts, and the retrained model in the Model Registry."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import free_port
from tests.helpers import run_cli

TRIALS = 3
SEEDS = 2


class Rest:
    def __init__(self, base: str) -> None:
        self.base = base

    def get(self, endpoint: str, **query: Any) -> dict[str, Any]:
        url = f"{self.base}{endpoint}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.loads(response.read())

    def post(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.base}{endpoint}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def raw(self, endpoint: str, **query: Any) -> bytes:
        url = f"{self.base}{endpoint}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read()


# What docs/guide/results.md tells users: MLflow 3's job runner (a job process and 7 task
# consumers, for its GenAI scorers and prompt optimisation) is not needed by dmlsearch; off, the
# server starts 2 processes instead of 10 (about 24 CPU-seconds less on 2 cores).
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = open(root / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{root / 'server.db'}",
         "--artifacts-destination", str(root / "artifacts"), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=root,
        env={**os.environ, **SERVER_ENV})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("mlflow server did not start:\n"
                                   + (root / "server.log").read_text()[-3000:])
            time.sleep(1)
        yield base, root
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="module")
def search(server: tuple[str, Path], shared_cache: Path) -> tuple[Path, Rest, str]:
    base, root = server
    out = root / "results"
    proc = run_cli("run", "--trials", str(TRIALS), "--concurrency", "2", "--out", str(out),
                   "--mlflow-uri", base, "--set", "epochs=2", "--set", "embedding_size=32",
                   "--grace-period", "1", "--reduction-factor", "2", "--seeds", str(SEEDS),
                   cache=shared_cache, cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, Rest(base), proc.stdout


def _runs(rest: Rest, experiment_id: str) -> dict[str, list[dict[str, Any]]]:
    found = rest.post("/api/2.0/mlflow/runs/search",
                      {"experiment_ids": [experiment_id], "max_results": 200})["runs"]
    kinds: dict[str, list[dict[str, Any]]] = {}
    for run in found:
        tags = {t["key"]: t["value"] for t in run["data"].get("tags", [])}
        run["tags"] = tags
        run["params"] = {p["key"]: p["value"] for p in run["data"].get("params", [])}
        run["metrics"] = {m["key"]: m["value"] for m in run["data"].get("metrics", [])}
        kinds.setdefault(tags["dmlsearch.kind"], []).append(run)
    return kinds


def _artifacts(rest: Rest, run_id: str, path: str = "") -> set[str]:
    listed = rest.get("/api/2.0/mlflow/artifacts/list", run_id=run_id, path=path)
    return {f["path"] for f in listed.get("files", [])}


@pytest.mark.slow
def test_the_study_is_a_browsable_tree_on_the_server(search: tuple[Path, Rest, str]) -> None:
    out, rest, stdout = search
    experiment = rest.get("/api/2.0/mlflow/experiments/get-by-name",
                          experiment_name=out.name)["experiment"]
    # A server store keeps the artifacts itself (proxied), not in the results folder.
    assert experiment["artifact_location"].startswith("mlflow-artifacts:")
    kinds = _runs(rest, experiment["experiment_id"])
    (study,) = kinds["study"]
    parent = study["info"]["run_id"]
    assert study["info"]["status"] == "FINISHED"
    assert study["params"]["space"] == "quickstart" and study["params"]["sampler"] == "tpe"
    assert study["params"]["protocol"] == "fixed" and "dmlsearch.code_revision" in study["tags"]
    assert study["metrics"]["trials_failed"] == 0
    assert 0 <= study["metrics"]["test_ci95_map_at_r"] and "test_mean_map_at_r" in study["metrics"]

    trials = kinds["trial"]
    # 3 trials' worth of 2 epochs, which ASHA (first decision after 1) spreads over up to 6
    assert TRIALS <= len(trials) <= 2 * TRIALS
    assert len(trials) == len(json.loads((out / "summary.json").read_text())["trials"])
    for run in trials:
        assert run["tags"]["mlflow.parentRunId"] == parent
        assert run["tags"]["dmlsearch.state"] in {"completed", "pruned"}
        assert run["info"]["status"] == "FINISHED" and "lr" in run["params"]
        history = rest.get("/api/2.0/mlflow/metrics/get-history", run_id=run["info"]["run_id"],
                           metric_key="val_map_at_r")["metrics"]
        assert 1 <= len(history) <= 2 and all(0 <= m["value"] <= 1 for m in history)

    retrains = sorted(kinds["retrain"], key=lambda r: int(r["tags"]["dmlsearch.seed"]))
    assert len(retrains) == SEEDS
    assert {r["tags"]["mlflow.parentRunId"] for r in retrains} == {parent}
    assert [int(r["tags"]["dmlsearch.seed"]) for r in retrains] == [0, 1]
    assert all(0 < r["metrics"]["test_map_at_r"] <= 1 for r in retrains)
    mean = sum(r["metrics"]["test_map_at_r"] for r in retrains) / SEEDS
    assert study["metrics"]["test_mean_map_at_r"] == pytest.approx(mean, rel=1e-6)
    assert "± " in stdout and "95% confidence interval" in stdout


@pytest.mark.slow
def test_plots_export_and_embeddings_are_artifacts(search: tuple[Path, Rest, str]) -> None:
    out, rest, _ = search
    experiment = rest.get("/api/2.0/mlflow/experiments/get-by-name",
                          experiment_name=out.name)["experiment"]
    kinds = _runs(rest, experiment["experiment_id"])
    parent = kinds["study"][0]["info"]["run_id"]
    assert {"best_config.yaml", "summary.json", "search.yaml", "plots"} <= _artifacts(rest, parent)
    assert _artifacts(rest, parent, "plots") == {
        "plots/optimisation_history.png", "plots/parallel_coordinates.png",
        "plots/learning_curves.png"}
    png = rest.raw("/get-artifact", path="plots/parallel_coordinates.png", run_uuid=parent)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    exported = rest.raw("/get-artifact", path="best_config.yaml", run_uuid=parent).decode()
    assert "dmlsearch_export" in exported and str(out.parent) not in exported
    first = next(r for r in kinds["retrain"] if r["tags"]["dmlsearch.seed"] == "0")
    assert _artifacts(rest, first["info"]["run_id"], "embeddings") == {
        "embeddings/test_embeddings_2d.png"}


@pytest.mark.slow
def test_the_retrained_model_is_registered_with_its_signature(
        search: tuple[Path, Rest, str]) -> None:
    out, rest, stdout = search
    name = f"dmlsearch-{out.name}"
    registered = rest.get("/api/2.0/mlflow/registered-models/get", name=name)["registered_model"]
    (latest,) = registered["latest_versions"]
    version = rest.get("/api/2.0/mlflow/model-versions/get", name=name,
                       version=latest["version"])["model_version"]
    experiment = rest.get("/api/2.0/mlflow/experiments/get-by-name",
                          experiment_name=out.name)["experiment"]
    first = next(r for r in _runs(rest, experiment["experiment_id"])["retrain"]
                 if r["tags"]["dmlsearch.seed"] == "0")
    assert version["run_id"] == first["info"]["run_id"]
    assert first["tags"]["dmlsearch.registered_model"] == f"{name}/1"
    assert f"Registered in the MLflow Model Registry as {name}/1" in stdout
    import mlflow

    mlflow.set_tracking_uri(rest.base)
    info = mlflow.models.get_model_info(f"models:/{name}/1")
    (spec,) = info.signature.inputs.inputs
    assert str(spec.type) == "uint8" and tuple(spec.shape)[0] == -1 and len(spec.shape) == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["registered_model"] == f"{name}/1"
    (retrained,) = summary["retrains"]
    assert retrained["seeds"] == [0, 1] and len(retrained["test_metrics"]) == SEEDS
