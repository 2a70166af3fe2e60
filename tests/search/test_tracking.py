"""MLflow: the retrained model in the Model Registry (real SQLite store; raw uint8 images in,
the same embeddings out as the trained network gives, its input signature recorded, loadable
without dmlsearch), the names it logs under, and the UI command."""
from __future__ import annotations

import os
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch

from dmlsearch.search.tracking import Tracker
from dmlsearch.search.tracking import browse_command
from dmlsearch.search.tracking import metric_name
from dmlsearch.search.tracking import model_name
from dmlsearch.search.tracking import trial_run_name
from dmlsearch.search.tune.study import record_number
from dmlsearch.trainables.models import build_model
from dmlsearch.trainables.models import prepare_input


@pytest.fixture()
def tracker(tmp_path: Path) -> Tracker:
    return Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "registry",
                   artifact_location=tmp_path / "mlartifacts")


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(backbone="smallcnn", in_channels=1, embedding_size=16,
                       pooling="gap").eval()


def test_registered_model_takes_raw_images_and_matches_the_network(tracker: Tracker) -> None:
    tracker.start_study(name="study", params={}, tags={})
    model = _model(0)
    run_id = tracker.log_retrain(name="retrain", config={"seed": 0}, test_metrics={"map@r": 0.5},
                               history=[], tags={})
    version = tracker.register_model(run_id, model, channels=1, size=28, name="dml-test",
                                     description="a test model")
    assert version == "1"
    mlflow.set_tracking_uri(tracker.uri)
    info = mlflow.models.get_model_info("models:/dml-test/1")
    (spec,) = info.signature.inputs.inputs
    assert spec.type == np.dtype(np.uint8) and tuple(spec.shape) == (-1, 1, 28, 28)
    (out_spec,) = info.signature.outputs.inputs
    assert tuple(out_spec.shape) == (-1, 16)

    images = torch.randint(0, 256, (5, 1, 28, 28), dtype=torch.uint8)
    loaded = mlflow.pytorch.load_model("models:/dml-test/1")
    with torch.no_grad():
        want = model(prepare_input(model, images, torch.device("cpu")))
        got = loaded(images)
    assert got.shape == (5, 16)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert torch.allclose(got.norm(dim=1), torch.ones(5), atol=1e-5)  # L2-normalised

    client = tracker.client
    mv = client.get_model_version("dml-test", "1")
    assert mv.run_id == run_id and mv.description == "a test model"
    assert client.get_run(run_id).data.tags["dmlsearch.registered_model"] == "dml-test/1"


def test_an_audio_model_takes_features_of_any_length(tracker: Tracker) -> None:
    """The kind's model input (input_kinds.ModelInput), not an audio branch: float32 features
    ``[-1, n_features, -1]``; the model loaded back embeds utterances of another length."""
    tracker.start_study(name="study", params={}, tags={})
    torch.manual_seed(0)
    model = build_model(backbone="tdnn_small", in_channels=20, embedding_size=8,
                        pooling="gap").eval()
    run_id = tracker.log_retrain(name="r", config={}, test_metrics={}, history=[], tags={})
    tracker.register_model(run_id, model, channels=20, kind="audio", name="dml-audio")
    mlflow.set_tracking_uri(tracker.uri)
    (spec,) = mlflow.models.get_model_info("models:/dml-audio/1").signature.inputs.inputs
    assert spec.type == np.dtype(np.float32) and tuple(spec.shape) == (-1, 20, -1)
    features = torch.randn(3, 20, 150)
    with torch.no_grad():
        got = mlflow.pytorch.load_model("models:/dml-audio/1")(features)
        want = model(prepare_input(model, features, torch.device("cpu")))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_a_second_registration_is_a_new_version(tracker: Tracker) -> None:
    tracker.start_study(name="study", params={}, tags={})
    for seed in (0, 1):
        run_id = tracker.log_retrain(name=f"r{seed}", config={}, test_metrics={}, history=[],
                                   tags={})
        version = tracker.register_model(run_id, _model(seed), channels=1, size=28,
                                         name="dml-twice")
    assert version == "2"
    assert len(tracker.client.search_model_versions("name='dml-twice'")) == 2


def test_registering_leaves_the_processs_store_as_it_was(
        tracker: Tracker, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's ``set_tracking_uri`` exports ``MLFLOW_TRACKING_URI``: left set, the next search in
    the same process (the Python API) or any child took this store for the user's choice (the
    CI of stop 38: later searches wrote to an earlier test's server)."""
    for exported in (None, "sqlite:////elsewhere/mlflow.db"):
        if exported is None:
            monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        else:
            monkeypatch.setenv("MLFLOW_TRACKING_URI", exported)
        tracker.start_study(name="study", params={}, tags={})
        run_id = tracker.log_retrain(name="r", config={}, test_metrics={}, history=[], tags={})
        tracker.register_model(run_id, _model(0), channels=1, size=28, name="dml-env")
        assert os.environ.get("MLFLOW_TRACKING_URI") == exported
        if exported is None:
            assert mlflow.get_tracking_uri() != tracker.uri


def test_the_registered_model_loads_without_dmlsearch(tracker: Tracker, tmp_path: Path) -> None:
    """An exported graph, not a pickle: a process where dmlsearch cannot be imported loads it."""
    import subprocess
    import sys

    tracker.start_study(name="study", params={}, tags={})
    run_id = tracker.log_retrain(name="r", config={}, test_metrics={}, history=[], tags={})
    tracker.register_model(run_id, _model(0), channels=1, size=28, name="dml-alone")
    code = (
        "import sys\n"
        "for name in ('dmlsearch',):\n"
        "    sys.modules[name] = None  # any import of them raises ImportError\n"
        "import mlflow, torch\n"
        f"mlflow.set_tracking_uri({tracker.uri!r})\n"
        "model = mlflow.pytorch.load_model('models:/dml-alone/1')\n"
        "out = model(torch.zeros(3, 1, 28, 28, dtype=torch.uint8))\n"
        "print(tuple(out.shape))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "(3, 16)"


def test_model_name_prefixes_once() -> None:
    assert model_name("results") == "dmlsearch-results"
    assert model_name("dmlsearch-quickstart-20261123") == "dmlsearch-quickstart-20261123"


def test_the_mlflow_ui_command_binds_to_localhost() -> None:
    assert "--host 127.0.0.1" in browse_command("sqlite:////r/mlflow.db")


def test_metric_names_mlflow_accepts() -> None:
    assert metric_name("recall@1") == "recall_at_1" and metric_name("val_map@r") == "val_map_at_r"
    assert metric_name("loss.margin[proxy_anchor]") == "loss.margin_proxy_anchor_"


def test_trial_runs_are_named_by_what_tells_them_apart() -> None:
    """The trial's one name (its Optuna number, as the terminal says it) and every searched
    value of its branch; Ray's id for a trial no searcher numbered."""
    config = {"loss": "proxy_anchor", "lr": 0.0025, "embedding_size": 64, "epochs": 8,
              "loss.alpha": 32.0, "loss.margin": 0.1}
    record_number("ab12cd34", 7)
    searched = ["lr", "loss", "embedding_size", "loss.alpha", "loss.margin", "loss.beta"]
    assert trial_run_name("ab12cd34", config, searched) == (
        "t07 proxy_anchor lr=2.5e-03 embedding_size=64 loss.alpha=32 loss.margin=0.1")
    assert trial_run_name("ffff0000", {"lr": 0.05}, ["lr"]) == "ffff0000 lr=0.05"


def test_close_dangling_ends_only_this_searchs_open_trials(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mine = Tracker(uri, "compare", method="tpe")
    other = Tracker(uri, "compare", method="random")  # another method in the same experiment
    for tracker in (mine, other):
        tracker.start_study(name=f"study {tracker.method}", params={}, tags={})
        for trial in ("t0", "t1", "t2"):
            tracker.trial_started(trial, {"lr": 0.1})
        tracker.trial_finished("t0", "completed", None)
        tracker.trial_finished("t1", "failed", "loss became nan")
    assert mine.close_dangling() == 1
    assert mine.close_dangling() == 0  # nothing left open
    status = {(r.data.tags["dmlsearch.method"], r.data.tags["dmlsearch.trial_id"]):
              (r.info.status, r.data.tags["dmlsearch.state"])
              for r in mine.client.search_runs([mine.experiment_id],
                                                "tags.`dmlsearch.kind` = 'trial'")}
    assert status == {("tpe", "t0"): ("FINISHED", "completed"),
                      ("tpe", "t1"): ("FAILED", "failed"),
                      ("tpe", "t2"): ("KILLED", "killed"),
                      ("random", "t0"): ("FINISHED", "completed"),
                      ("random", "t1"): ("FAILED", "failed"),
                      ("random", "t2"): ("RUNNING", "running")}


def test_the_registered_model_serves_numeric_arrays_through_pyfunc(tracker: Tracker) -> None:
    """``mlflow.pyfunc`` (what ``mlflow models serve`` and batch scoring use) takes the images
    as one numpy array and answers what the PyTorch flavour answers; input of another size or
    dtype is refused by the signature's check, in MLflow's words, before the graph runs."""
    tracker.start_study(name="study", params={}, tags={})
    model = _model(0)
    run_id = tracker.log_retrain(name="r", config={}, test_metrics={}, history=[], tags={})
    tracker.register_model(run_id, model, channels=1, size=28, name="dml-pyfunc")
    mlflow.set_tracking_uri(tracker.uri)
    images = np.random.default_rng(0).integers(0, 256, (4, 1, 28, 28), dtype=np.uint8)
    served = mlflow.pyfunc.load_model("models:/dml-pyfunc/1")
    got = np.asarray(served.predict(images))
    with torch.no_grad():
        want = model(prepare_input(model, torch.from_numpy(images), torch.device("cpu")))
    assert got.shape == (4, 16)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(mlflow.exceptions.MlflowException, match="shape"):
        served.predict(np.zeros((2, 1, 32, 32), np.uint8))
    with pytest.raises(mlflow.exceptions.MlflowException, match="uint8"):
        served.predict(np.zeros((2, 1, 28, 28), np.float64))


@pytest.mark.slow
def test_the_registered_model_answers_mlflow_models_serve(tracker: Tracker,
                                                           tmp_path: Path) -> None:
    """``mlflow models serve`` on 127.0.0.1 (a real server process) answers a JSON batch of
    uint8 images with the embeddings the network gives."""
    import json
    import os
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    from tests.helpers import free_port

    tracker.start_study(name="study", params={}, tags={})
    model = _model(0)
    run_id = tracker.log_retrain(name="r", config={}, test_metrics={}, history=[], tags={})
    tracker.register_model(run_id, model, channels=1, size=28, name="dml-served")
    port = free_port()
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    # It starts ``uvicorn`` by name: the environment's programs first, activated or not.
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracker.uri,
           "PATH": os.pathsep.join([str(mlflow_cli.parent), os.environ.get("PATH", "")])}
    server = subprocess.Popen(
        [str(mlflow_cli), "models", "serve", "-m", "models:/dml-served/1", "--env-manager",
         "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    images = np.random.default_rng(1).integers(0, 256, (3, 1, 28, 28), dtype=np.uint8)
    body = json.dumps({"inputs": images.tolist()}).encode()
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/invocations", data=body,
                    headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=30) as reply:
                    answer = json.loads(reply.read())
                break
            except urllib.error.HTTPError as exc:  # the server answered: no retry
                pytest.fail(f"mlflow models serve answered {exc.code}: {exc.read()[:2000]!r}")
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, server.stderr.read().decode()[-3000:]
                assert time.monotonic() < deadline, "mlflow models serve did not answer"
                time.sleep(1)
    finally:
        server.terminate()
        server.wait(timeout=30)
    got = np.asarray(answer["predictions"], dtype=np.float32)
    with torch.no_grad():
        want = model(prepare_input(model, torch.from_numpy(images), torch.device("cpu")))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


def test_a_pruned_trial_is_told_apart_from_a_completed_one_in_the_run_list(
        tmp_path: Path) -> None:
    """MLflow shows both as "Finished": the pruned one's name says it was stopped early."""
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "pruned")
    tracker.start_study(name="study", params={}, tags={})
    tracker.describe(searched=["lr"])
    # ids no other test uses: the names recorded here last as long as the process
    for number, (trial, lr) in enumerate((("pruned-a", 0.1), ("pruned-b", 0.01))):
        record_number(trial, number)  # what the searcher says when it proposes them
        tracker.trial_started(trial, {"lr": lr})
    tracker.trial_finished("pruned-a", "completed", None)
    tracker.trial_finished("pruned-b", "pruned", None)
    tracker.trial_finished("pruned-b", "pruned", None)  # told twice (a resume): marked once
    runs = {r.data.tags["dmlsearch.trial_id"]: r for r in tracker.client.search_runs(
        [tracker.experiment_id], "tags.`dmlsearch.kind` = 'trial'")}
    assert runs["pruned-a"].info.run_name == "t00 lr=0.1"
    assert runs["pruned-b"].info.run_name == "t01 (pruned) lr=0.01"  # seen in a cut column
    assert {r.info.status for r in runs.values()} == {"FINISHED"}


def test_a_retrain_logs_scores_as_metrics_and_the_test_sets_size_as_a_tag(
        tracker: Tracker) -> None:
    tracker.start_study(name="study", params={}, tags={})
    run_id = tracker.log_retrain(name="r", config={}, history=[], tags={},
                                 test_metrics={"map@r": 0.5, "num_queries": 1200.0})
    run = tracker.client.get_run(run_id)
    assert run.data.metrics == {"test_map_at_r": 0.5}
    assert run.data.tags["dmlsearch.test_num_queries"] == "1200"
