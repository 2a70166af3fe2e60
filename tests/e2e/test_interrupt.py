"""Ctrl-C on ``dmlsearch run`` (a terminal's: the whole process group) stops the search and
leaves it to resume, instead of finishing it as if the running trials had been stopped by the
scheduler: exit 130, one line saying how to continue, no summary, no MLflow run left RUNNING;
``dmlsearch resume`` then takes it to its end (a replayed search: the same driver, Ray Tune and
stores as a training one)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers import CURVE_SPACE
from tests.helpers import cli_command
from tests.helpers import cli_env
from tests.helpers import ctrl_c_reaches_children
from tests.helpers import run_cli

pytestmark = pytest.mark.slow


def _statuses(out: Path) -> dict[str, list[str]]:
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    by: dict[str, list[str]] = {}
    for run in runs:
        by.setdefault(run.data.tags.get("dmlsearch.kind", "-"), []).append(run.info.status)
    return by


def _reported(out: Path) -> bool:
    """Whether a trial has reported an epoch (Ray's result file of one is not empty)."""
    return any(f.stat().st_size > 0 for f in (out / "ray").glob("**/result.json"))


def test_ctrl_c_leaves_the_search_to_resume(curve_table: Path, tmp_path: Path) -> None:
    out = tmp_path / "search"
    cache = tmp_path / "cache"
    with ctrl_c_reaches_children():
        proc = subprocess.Popen(
            cli_command("run", "--space", str(CURVE_SPACE), "--replay", str(curve_table),
                        "--out", str(out), "--trials", "6", "--concurrency", "2",
                        "--replay-speedup", "1"),
            env=cli_env(cache), cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600  # a guard against a hang, not a timing
    while proc.poll() is None and time.monotonic() < deadline and not _reported(out):
        time.sleep(0.2)
    assert proc.poll() is None, "the search ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 130, stdout[-2000:] + stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last == ("dmlsearch: interrupted: Ray Tune saved the experiment; continue it with "
                    f"`dmlsearch resume {out.resolve()}`")
    assert not (out / "summary.json").exists()  # not finished as if the budget were spent
    stopped = _statuses(out)
    assert stopped["study"] == ["KILLED"] and "RUNNING" not in stopped.get("trial", [])

    resumed = run_cli("resume", str(out), cache=cache)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert (out / "summary.json").is_file()
    ended = _statuses(out)
    assert ended["study"] == ["FINISHED"] and set(ended["trial"]) == {"FINISHED"}
