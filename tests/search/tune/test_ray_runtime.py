"""Ray for a search: a local start serves no dashboard, and Ray Tune hands the driver's cloud
credentials to no trial."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dmlsearch.search.tune import ray_runtime
from tests.helpers import REPO as ROOT

_LISTENING = """
import json, os, time
os.environ.pop("RAY_ADDRESS", None)
from dmlsearch.search.tune import ray_runtime
ray_runtime.init_ray(num_cpus=2, num_gpus=0)
ports = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    with open(table) as lines:
        for row in list(lines)[1:]:
            local, state = row.split()[1], row.split()[3]
            if state == "0A":  # LISTEN
                ports.add(int(local.rsplit(":", 1)[1], 16))
import psutil  # Ray's dependency
idle = 0
for _ in range(12):  # Ray prestarts its idle workers within a second or two of the driver
    time.sleep(0.25)
    idle = max(idle, sum("ray::IDLE" in " ".join(p.cmdline())
                         for p in psutil.Process().children(recursive=True)))
ray_runtime.shutdown_ray()
print(json.dumps({"ports": sorted(ports), "idle": idle,
                  "variable": os.environ.get("RAY_prestart_worker_first_driver")}))
"""


def _init_ray_in_a_fresh_process(**env_vars: str) -> dict:
    """What a real ``init_ray`` in a fresh process started: its listening ports (read from the
    kernel), its most idle workers at once, and the prestart variable after it."""
    env = {**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray", dir="/tmp"), **env_vars}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", _LISTENING], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def started() -> dict:
    return _init_ray_in_a_fresh_process()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc/net/tcp")
def test_a_local_search_starts_no_ray_dashboard(started: dict) -> None:
    """Ray's web dashboard (port 8265 and the next ones) is not started by a search's local
    cluster."""
    assert started["ports"], "no listening port seen: Ray did not start"
    assert not set(started["ports"]) & set(range(8265, 8265 + 51)), started["ports"]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc/net/tcp")
def test_a_local_search_starts_no_idle_ray_workers(started: dict) -> None:
    """Ray's idle workers (one per CPU, which Ray Tune's trials never use) are not started,
    the variable that says so is gone after the start, and a user's own value is kept: with
    Ray's default the idle workers are there (what the first check would see without it)."""
    assert started["idle"] == 0 and started["variable"] is None, started
    users = _init_ray_in_a_fresh_process(RAY_prestart_worker_first_driver="1")
    assert users["idle"] >= 1 and users["variable"] == "1", users


def test_ray_tune_hands_no_credentials_to_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.tune.execution import class_cache

    # Ray's own hand-over, as a fresh process has it (an earlier search in this process may
    # already have trimmed the module's set).
    handed = set(class_cache.ENV_VARS_TO_PROPAGATE) | {"AWS_SECRET_ACCESS_KEY",
                                                        "AWS_ACCESS_KEY_ID"}
    monkeypatch.setattr(class_cache, "ENV_VARS_TO_PROPAGATE", handed)  # restored afterwards
    others = {n for n in handed if not n.startswith(("AWS_", "AZURE_", "GOOGLE_"))}
    ray_runtime.keep_credentials_home()
    assert not {n for n in class_cache.ENV_VARS_TO_PROPAGATE if n.startswith("AWS_")}
    assert others <= class_cache.ENV_VARS_TO_PROPAGATE  # the rest of the hand-over stays
