"""Issue 33's whole path, as a user takes it: a loss of their own in a file (examples/my_loss.py)
compared against proxy_anchor and multi_similarity by a Python script (examples/
compare_my_loss.py, `dmlsearch.compare`), on images listed in a CSV table, on a real two-node Ray
cluster on this machine whose head offers no CPU to trials (so every trial runs on the worker
node, where the plug-in must arrive with the search), logged to an `mlflow server` named by
MLFLOW_TRACKING_URI; the plug-in method's registered model then answers `mlflow models serve`
on 127.0.0.1."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from tests.cluster._loopback import LoopbackCluster
from tests.cluster._loopback import can_bind
from tests.e2e.test_mlflow_server import server  # noqa: F401 - the real `mlflow server`
from tests.helpers import REPO
from tests.helpers import free_port

WORKER_IP = "127.0.0.4"
CLASSES, PER_CLASS = 48, 8

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)"),
    pytest.mark.skipif(not can_bind(WORKER_IP), reason=f"{WORKER_IP} cannot be bound here"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    root = tmp_path_factory.mktemp("byo-cluster")
    ray = LoopbackCluster.new(root, extra_env={"DMLSEARCH_CACHE": str(root / "cache")})
    try:
        ray.start_head(num_cpus=0)  # the driver's node: every trial goes to the worker
        ray.start_worker(WORKER_IP, num_cpus=2)
        yield ray
    finally:
        ray.stop()


def _glyph_table(folder: Path) -> Path:
    """The built-in glyphs as PNG files listed in a CSV table (no split column: computed)."""
    from PIL import Image

    from dmlsearch.trainables.data import load_dataset

    images = load_dataset("glyphs").images
    labels = np.asarray(images.labels)
    rows = []
    for label in np.unique(labels)[:CLASSES]:
        for n, index in enumerate(np.flatnonzero(labels == label)[:PER_CLASS]):
            name = Path("images") / f"c{label:03d}" / f"{n}.png"
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(images.images[index, 0].numpy()).save(folder / name)
            rows.append({"path": str(name), "label": f"glyph-{label}"})
    table = folder / "items.csv"
    with table.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label"])
        writer.writeheader()
        writer.writerows(rows)
    return table


def _serve(model_uri: str, tracking_uri: str, images: np.ndarray, cwd: Path) -> np.ndarray:
    port = free_port()
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri,
           "PATH": os.pathsep.join([str(mlflow_cli.parent), os.environ.get("PATH", "")])}
    proc = subprocess.Popen(
        [str(mlflow_cli), "models", "serve", "-m", model_uri, "--env-manager", "local", "-h",
         "127.0.0.1", "-p", str(port), "-w", "1"],
        env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    body = json.dumps({"inputs": images.tolist()}).encode()
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations",
                                                 data=body,
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=30) as reply:
                    return np.asarray(json.loads(reply.read())["predictions"], np.float32)
            except urllib.error.HTTPError as exc:
                pytest.fail(f"mlflow models serve answered {exc.code}: {exc.read()[:2000]!r}")
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.stderr.read().decode()[-3000:]  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "mlflow models serve did not answer"
                time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_users_loss_is_compared_on_a_cluster_and_its_model_served(
        cluster: LoopbackCluster, server: tuple[str, Path], tmp_path: Path) -> None:  # noqa: F811
    tracking_uri, _ = server
    table = _glyph_table(tmp_path)
    env = {**cluster.env, "RAY_ADDRESS": cluster.gcs_address, "MLFLOW_TRACKING_URI": tracking_uri}
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "compare_my_loss.py"), "--data-root",
         str(table), "--out", "compared", "--trials", "2", "--epochs", "2", "--seeds", "2",
         "--storage", str(tmp_path / "shared")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "margin_proxy" in proc.stdout and "report:" in proc.stdout
    compared = tmp_path / "compared"

    # Every method searched; each trial ran on the worker node, the plug-in's included.
    ran: dict[str, set[str]] = {}
    for result in (tmp_path / "shared").rglob("trial_*/result.json"):
        params = json.loads((result.parent / "params.json").read_text())
        nodes = {json.loads(line)["node_ip"] for line in result.read_text().splitlines()}
        ran.setdefault(params["loss"], set()).update(nodes)
        assert params["dataset"] == "table" and params["plugins"]
    assert ran == {loss: {WORKER_IP} for loss in
                   ("margin_proxy", "proxy_anchor", "multi_similarity")}, ran
    mine = json.loads((compared / "margin_proxy" / "summary.json").read_text())
    assert {t["state"] for t in mine["trials"]} <= {"completed", "pruned"}
    assert len(mine["retrains"][0]["seeds"]) == 2
    assert not (compared / "mlflow.db").exists()  # the server named by the variable has it

    # The server holds the comparison, and the plug-in method's model, which serves.
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              "tags.`dmlsearch.kind` = 'trial'", max_results=500)
    assert "margin_proxy" in {r.data.params.get("loss") for r in runs}
    models = [m.name for m in client.search_registered_models() if "margin_proxy" in m.name]
    assert models, [m.name for m in client.search_registered_models()]
    images = np.random.default_rng(0).integers(0, 256, (3, 3, 32, 32), dtype=np.uint8)  # RGB
    embeddings = _serve(f"models:/{models[0]}/1", tracking_uri, images, tmp_path)
    assert embeddings.shape[0] == 3
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-4)
