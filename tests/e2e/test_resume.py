"""A search whose driver is killed with SIGKILL mid-way resumes to completion: completed trials
are kept and not re-run, interrupted ones continue from their checkpoints, nothing is left
RUNNING in MLflow or Optuna, and the trial count is right with no duplicates; and a kill that
finds Ray Tune's saved experiment behind the study (a trial pruned, a proposal asked for since
Ray last saved it) loses nothing and trains nothing twice."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from tests.helpers import between_saves
from tests.helpers import cli_command
from tests.helpers import kill_tree
from tests.helpers import run_cli

TRIALS = 5
EPOCHS = 4  # long enough that a half-way trial is still running when the plug is pulled
# Guards against a hang, not timings: on 2 busy cores a resume trains for tens of minutes.
FIRST_S, RESUME_S = 1800, 2400


def _runs_by_state(out: Path) -> dict[str, list]:
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(out.name)
    if exp is None:
        return {}
    runs = client.search_runs([exp.experiment_id],
                              filter_string="tags.`dmlsearch.kind` = 'trial'", max_results=100)
    by: dict[str, list] = {}
    for run in runs:
        by.setdefault(run.info.status, []).append(run)
    return by


def _checkpointed(out: Path, run) -> bool:  # noqa: ANN001 - an MLflow run
    """Whether Ray holds a checkpoint of this running trial (a background one is handed with
    the report after its write, so a trial can report epochs before it has one)."""
    trial = out / "ray" / "tune" / f"trial_{run.data.tags['dmlsearch.trial_id']}"
    return any(trial.glob("checkpoint_*"))


@pytest.mark.slow
def test_a_killed_search_resumes_to_completion(tmp_path: Path, shared_cache: Path) -> None:
    out = tmp_path / "results"
    ray_tmp = tempfile.mkdtemp(prefix="dr", dir="/tmp")  # short: Ray's socket paths are limited
    env = {**os.environ, "DMLSEARCH_CACHE": str(shared_cache), "RAY_TMPDIR": ray_tmp,
           "PYTHONUNBUFFERED": "1", "TUNE_GLOBAL_CHECKPOINT_S": "1"}
    args = ["run", "--trials", str(TRIALS), "--concurrency", "2", "--out", str(out),
            "--set", f"epochs={EPOCHS}", "--set", "embedding_size=16", "--scheduler", "none",
            "--set", "checkpoint_every=1", "--seed", "7", "--no-retrain"]
    log = (tmp_path / "first.log").open("w")
    driver = subprocess.Popen(cli_command(*args), env=env, cwd=tmp_path,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + FIRST_S
        while time.monotonic() < deadline:  # two trials done, one half-way: then pull the plug
            time.sleep(1)
            assert driver.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            # search.yaml is written once the driver has created the MLflow store's tables
            runs = _runs_by_state(out) if (out / "search.yaml").exists() else {}
            finished, running = runs.get("FINISHED", []), runs.get("RUNNING", [])
            if len(finished) >= 2 and any(_checkpointed(out, r) for r in running):
                break
        else:
            pytest.fail("the search did not reach two finished trials in time")
        time.sleep(2)  # let Ray's experiment state (saved every second here) see the checkpoint
        between_saves(out)
        before = _runs_by_state(out)
        done_before = {r.data.tags["dmlsearch.trial_id"] for r in before.get("FINISHED", [])}
        interrupted = {r.data.tags["dmlsearch.trial_id"] for r in before.get("RUNNING", [])
                       if _checkpointed(out, r)}
    finally:
        kill_tree(driver.pid, ray_tmp)
        driver.wait(timeout=60)
        log.close()
    assert not (out / "summary.json").exists()

    proc = run_cli("resume", str(out), cache=shared_cache, cwd=tmp_path, timeout=RESUME_S)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    summary = json.loads((out / "summary.json").read_text())
    ids = [t["trial_id"] for t in summary["trials"]]
    assert len(ids) == TRIALS and len(set(ids)) == TRIALS
    assert {t["state"] for t in summary["trials"]} == {"completed"}
    assert all(t["iterations"] == EPOCHS for t in summary["trials"])
    assert interrupted, "no trial was half-way when the driver was killed"
    assert done_before <= set(ids) and interrupted <= set(ids)

    # Completed trials were not re-run: one result per epoch, as before the kill.
    for tid in done_before:
        lines = (out / "ray" / "tune" / f"trial_{tid}" / "result.json").read_text().splitlines()
        assert [json.loads(x)["training_iteration"] for x in lines] == list(range(1, EPOCHS + 1))
    # Interrupted trials continued from a checkpoint, not from epoch 0.
    for tid in interrupted:
        lines = (out / "ray" / "tune" / f"trial_{tid}" / "result.json").read_text().splitlines()
        last = json.loads(lines[-1])
        assert last["training_iteration"] == EPOCHS
        assert last["iterations_since_restore"] < EPOCHS, last
        print(f"trial {tid} was interrupted and resumed from its checkpoint of epoch "
              f"{EPOCHS - last['iterations_since_restore']} (of {EPOCHS})")

    runs = _runs_by_state(out)
    assert set(runs) == {"FINISHED"}, {k: len(v) for k, v in runs.items()}
    assert sorted(r.data.tags["dmlsearch.trial_id"] for r in runs["FINISHED"]) == sorted(ids)
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    every_run = client.search_runs([client.get_experiment_by_name(out.name).experiment_id])
    assert "RUNNING" not in {r.info.status for r in every_run}  # the study run included
    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    states = [t.state for t in study.trials]
    # every study trial trained to its end (a proposal the kill caught before Ray ran it was
    # proposed again as itself, not left FAIL)
    assert states == [optuna.trial.TrialState.COMPLETE] * TRIALS, [
        (t.number, t.state.name, t.user_attrs) for t in study.trials]

    # Ray Tune's records, the Optuna study, MLflow and the summary agree, trial by trial: each
    # Ray trial's last reported score is its Optuna trial's value and its MLflow run's score.
    ray_scores = {}
    for tid in ids:
        lines = (out / "ray" / "tune" / f"trial_{tid}" / "result.json").read_text().splitlines()
        ray_scores[tid] = json.loads(lines[-1])["score"]
    complete = {t.user_attrs["ray_trial_id"]: t for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE}
    assert sorted(complete) == sorted(ids)
    mlflow_scores = {r.data.tags["dmlsearch.trial_id"]: r.data.metrics["score"]
                     for r in runs["FINISHED"]}
    for t in summary["trials"]:
        tid = t["trial_id"]
        assert complete[tid].value == pytest.approx(ray_scores[tid]), tid
        assert t["score"] == pytest.approx(ray_scores[tid]), tid
        assert mlflow_scores[tid] == pytest.approx(ray_scores[tid]), tid


def _kill_when(tmp_path: Path, args: list[str], env: dict[str, str], ray_tmp: str,
               ready: Callable[[], bool], *, timeout: float = FIRST_S) -> None:
    """``dmlsearch run args``, its driver killed (SIGKILL, with its Ray) once ``ready()``."""
    log = (tmp_path / "first.log").open("w")
    driver = subprocess.Popen(cli_command(*args), env=env, cwd=tmp_path,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert time.monotonic() < deadline, "the search did not get there in time"
            assert driver.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            time.sleep(0.2)
    finally:
        kill_tree(driver.pid, ray_tmp)
        driver.wait(timeout=60)
        log.close()


def _study_states(db: Path) -> list[str]:
    """The study's trial states, read as another process reads a SQLite file being written."""
    if not db.is_file():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            return [state for (state,) in con.execute("select state from trials order by number")]
    except sqlite3.Error:  # the tables are still being made
        return []


@pytest.mark.slow
def test_a_resume_keeps_what_ran_after_ray_last_saved(tmp_path: Path,
                                                      shared_cache: Path) -> None:
    """One trial at a time, ASHA, killed as soon as the study holds two ended trials (the first
    warm start completed, the second pruned at its first rung) and, usually, the next proposal.
    Ray Tune saves its experiment every so often and after a trial's checkpoint (made here
    only at a trial's end), so what happened since the first trial's last checkpoint is in the
    study and the trials' folders, not in Ray's saved state (``TUNE_GLOBAL_CHECKPOINT_S``:
    never by the clock), as after any kill that comes seconds after an event. Resumed, the
    ended trials are kept in every record and not trained again, the proposal is trained once,
    as the study trial it was, and nothing ends FAIL."""
    out = tmp_path / "results"
    ray_tmp = tempfile.mkdtemp(prefix="dr", dir="/tmp")
    env = {**os.environ, "DMLSEARCH_CACHE": str(shared_cache), "RAY_TMPDIR": ray_tmp,
           "PYTHONUNBUFFERED": "1", "TUNE_GLOBAL_CHECKPOINT_S": "3600"}
    args = ["run", "--trials", "3", "--concurrency", "1", "--out", str(out), "--set",
            f"epochs={EPOCHS}", "--set", "embedding_size=16", "--seed", "7", "--no-retrain"]
    ended = ("COMPLETE", "PRUNED", "FAIL")
    _kill_when(tmp_path, args, env, ray_tmp, lambda: sum(
        s in ended for s in _study_states(out / "optuna.db")) >= 2)
    storage = f"sqlite:///{out / 'optuna.db'}"
    before = optuna.load_study(study_name=out.name, storage=storage).trials
    assert [t.state.name for t in before[:2]] == ["COMPLETE", "PRUNED"], before
    pruned = before[1].user_attrs["ray_trial_id"]
    # What a kill leaves between Ray making a trial's folder and starting the trial (seen once
    # in three runs): an empty folder of a trial no record holds. Resume removes it.
    (out / "ray" / "tune" / "trial_0badf00d").mkdir()

    proc = run_cli("resume", str(out), cache=shared_cache, cwd=tmp_path, timeout=RESUME_S)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the trials that ended before the kill are named as the study numbers them (t00), not by
    # Ray's ids, from the resume's first line on
    named = re.findall(r"^\[\d+\] trial (\S+) ", proc.stdout, flags=re.M)
    assert named and all(re.fullmatch(r"t\d\d", n) for n in named), named

    summary = json.loads((out / "summary.json").read_text())
    records = {t["trial_id"]: t for t in summary["trials"]}
    study = optuna.load_study(study_name=out.name, storage=storage).trials
    # Every trial that ran is in every record: the study, the summary, MLflow, Ray's folders.
    assert sorted(t.user_attrs["ray_trial_id"] for t in study) == sorted(records)
    assert {t.state.name for t in study} <= {"COMPLETE", "PRUNED"}, [
        (t.number, t.state.name, t.user_attrs) for t in study]
    runs = _runs_by_state(out)
    assert set(runs) == {"FINISHED"}, {k: len(v) for k, v in runs.items()}
    assert sorted(r.data.tags["dmlsearch.trial_id"] for r in runs["FINISHED"]) == sorted(records)
    assert {p.name for p in (out / "ray" / "tune").glob("trial_*")} == {
        f"trial_{tid}" for tid in records}
    # Neither ended trial was trained (or reported) again, under its own id or another one:
    # Ray had saved the completed one still running, with the checkpoint of its last epoch.
    def epochs(tid: str) -> list[int]:
        lines = (out / "ray" / "tune" / f"trial_{tid}" / "result.json").read_text().splitlines()
        return [json.loads(x)["training_iteration"] for x in lines]

    completed = before[0].user_attrs["ray_trial_id"]
    assert records[pruned]["state"] == "pruned" and records[pruned]["iterations"] == 1
    assert epochs(pruned) == [1] and epochs(completed) == list(range(1, EPOCHS + 1))
    assert all(t["iterations"] == EPOCHS for t in records.values() if t["state"] == "completed")
    # Each trial the study held at the kill (a proposal Ray had not run included) trained once.
    params = [t.params for t in study]
    for trial in before:
        assert params.count(trial.params) == 1, trial.params
