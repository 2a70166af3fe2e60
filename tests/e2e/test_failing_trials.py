"""Trials that fail alone: one real search (Ray Tune, Optuna's SQLite study, MLflow's SQLite
store) in which one trial's loss turns NaN, one runs out of memory and one cannot read its data.
Each is marked failed with its reason in Optuna and MLflow, the other trial completes, the search
finishes, and the summary counts the failures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
from mlflow.tracking import MlflowClient
from PIL import Image

from tests.helpers import cli_command

HUGE = 2**40  # an embedding layer of 2^40 x features floats: no allocator can give it
DIVERGE = 1.0e30  # a learning rate the loss cannot survive: NaN within a few steps


def _image_tree(root: Path, classes: int = 16, per_class: int = 8) -> Path:
    rng = np.random.default_rng(0)
    for c in range(classes):
        folder = root / f"class{c:02d}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, size=(12, 12, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{i}.png")
    return root


def _space(path: Path, data_root: Path) -> Path:
    path.write_text(f"""\
name: faults
source: dmlsearch tests (trials that fail alone)
base:
  data_root: {data_root}
  epochs: 1
  batch_size: 16
  m_per_class: 4
params:
  dataset: {{type: categorical, choices: [glyphs, folder]}}
  lr: {{type: categorical, choices: [1.0e-3, {DIVERGE}]}}
  embedding_size: {{type: categorical, choices: [16, {HUGE}]}}
warm_start:
  - {{dataset: glyphs, lr: 1.0e-3, embedding_size: 16}}
  - {{dataset: glyphs, lr: {DIVERGE}, embedding_size: 16}}
  - {{dataset: glyphs, lr: 1.0e-3, embedding_size: {HUGE}}}
  - {{dataset: folder, lr: 1.0e-3, embedding_size: 16}}
""")
    return path


def _kind(config: dict) -> str:
    if config["dataset"] == "folder":
        return "data"
    if config["embedding_size"] == HUGE:
        return "oom"
    return "nan" if config["lr"] == DIVERGE else "ok"


REASONS = {"nan": "loss became nan", "oom": "out of memory", "data": "data loading failed"}


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("faults")
    data = _image_tree(root / "images")
    space = _space(root / "faults.yaml", data)
    out = root / "results"
    ray_tmp = tempfile.mkdtemp(prefix="df", dir="/tmp")  # short: Ray's socket paths are limited
    env = {**os.environ, "DMLSEARCH_CACHE": str(shared_cache), "RAY_TMPDIR": ray_tmp,
           "PYTHONUNBUFFERED": "1"}
    args = ["run", "--space", str(space), "--trials", "4", "--concurrency", "2",
            "--scheduler", "none", "--seed", "0", "--no-retrain", "--out", str(out),
            # one retry each (Ray retries every error): the retry fails at once with the reason
            "--max-failures", "1"]
    log = root / "driver.log"
    with log.open("w") as sink:
        driver = subprocess.Popen(cli_command(*args), env=env,
                                  cwd=root, stdout=sink, stderr=subprocess.STDOUT)
        try:
            # The driver checked every dataset choice (preflight) before it wrote search.yaml;
            # an image that breaks now fails only the trial that reads it.
            deadline = time.monotonic() + 300
            while not (out / "search.yaml").exists():
                assert driver.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "the search did not start"
                time.sleep(0.1)
            (data / "class03" / "2.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image any more")
            driver.wait(timeout=900)
        finally:
            if driver.poll() is None:
                driver.kill()
            shutil.rmtree(ray_tmp, ignore_errors=True)
    text = log.read_text()
    assert driver.returncode == 0, text[-4000:]
    return out, text


@pytest.mark.slow
def test_summary_counts_failures_with_reasons(search: tuple[Path, str]) -> None:
    out, text = search
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trial_counts"] == {"completed": 1, "pruned": 0, "failed": 3}
    by_kind = {_kind(t["config"]): t for t in summary["trials"]}
    assert set(by_kind) == {"ok", "nan", "oom", "data"}
    assert by_kind["ok"]["state"] == "completed" and by_kind["ok"]["score"] > 0
    assert summary["best_trial"] == by_kind["ok"]["trial_id"]
    for kind, needle in REASONS.items():
        assert by_kind[kind]["state"] == "failed"
        assert needle in by_kind[kind]["reason"], (kind, by_kind[kind]["reason"])
    assert "class03/2.png" in by_kind["data"]["reason"]
    assert "4 trials (1 completed, 0 pruned, 3 failed)" in text


@pytest.mark.slow
def test_optuna_marks_each_failure_with_its_reason(search: tuple[Path, str]) -> None:
    out, _ = search
    summary = json.loads((out / "summary.json").read_text())
    kinds = {t["trial_id"]: _kind(t["config"]) for t in summary["trials"]}
    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    assert len(study.trials) == 4
    for trial in study.trials:
        kind = kinds[trial.user_attrs["ray_trial_id"]]  # the Ray trial it ran as
        if kind == "ok":
            assert trial.state == optuna.trial.TrialState.COMPLETE
            assert "dmlsearch_reason" not in trial.user_attrs
        else:
            assert trial.state == optuna.trial.TrialState.FAIL, kind
            assert REASONS[kind] in trial.user_attrs["dmlsearch_reason"], trial.user_attrs


@pytest.mark.slow
def test_mlflow_marks_each_failure_with_its_reason(search: tuple[Path, str]) -> None:
    out, _ = search
    summary = json.loads((out / "summary.json").read_text())
    kinds = {t["trial_id"]: _kind(t["config"]) for t in summary["trials"]}
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(out.name)
    runs = client.search_runs([exp.experiment_id], max_results=100)
    assert "RUNNING" not in {r.info.status for r in runs}
    (study,) = [r for r in runs if r.data.tags["dmlsearch.kind"] == "study"]
    assert study.info.status == "FINISHED"
    assert study.data.metrics["trials_failed"] == 3
    assert study.data.metrics["trials_completed"] == 1
    trials = [r for r in runs if r.data.tags["dmlsearch.kind"] == "trial"]
    assert len(trials) == 4
    for run in trials:
        kind = kinds[run.data.tags["dmlsearch.trial_id"]]
        if kind == "ok":
            assert run.info.status == "FINISHED"
            assert "dmlsearch.failure_reason" not in run.data.tags
        else:
            assert run.info.status == "FAILED", kind
            assert run.data.tags["dmlsearch.state"] == "failed"
            assert REASONS[kind] in run.data.tags["dmlsearch.failure_reason"]
