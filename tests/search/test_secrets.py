"""Nothing exposed: credentials in the environment never reach the results (MLflow's store and
artifacts, Optuna's study, Ray Tune's trial folders and logs, the exports, the report), Ray's own
session logs, or what the commands print; YAML is loaded safely; the MLflow UI binds to 127.0.0.1 and
no Ray dashboard is started."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECRET_VARS = ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN",
               "AZURE_STORAGE_KEY", "AZURE_STORAGE_CONNECTION_STRING", "MLFLOW_TRACKING_PASSWORD",
               "MLFLOW_TRACKING_TOKEN", "HF_TOKEN", "WANDB_API_KEY", "GITHUB_TOKEN")


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.slow
def test_credentials_in_the_environment_reach_no_file_and_no_output(tmp_path: Path) -> None:
    values = {name: f"sekrit{secrets.token_hex(12)}" for name in SECRET_VARS}
    key_file = tmp_path / f"gcp-{secrets.token_hex(8)}.json"  # a path is a secret too
    private_key = f"pk{secrets.token_hex(16)}"
    key_file.write_text(f'{{"type": "service_account", "private_key": "{private_key}"}}\n')
    values["GOOGLE_APPLICATION_CREDENTIALS"] = str(key_file)
    ray_tmp = tempfile.mkdtemp(prefix="ds", dir="/tmp")  # short: Ray's socket paths are limited
    env = {**os.environ, **values, "DMLSEARCH_CACHE": str(tmp_path / "cache"),
           "RAY_TMPDIR": ray_tmp, "PYTHONUNBUFFERED": "1"}
    out = tmp_path / "results"
    outputs = []

    def dmlsearch(*args: str) -> None:
        proc = subprocess.run([sys.executable, "-m", "dmlsearch.search.cli", *args], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=900)
        outputs.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    try:
        dmlsearch("run", "--trials", "2", "--concurrency", "2", "--out", str(out),
                  "--set", "epochs=1", "--set", "embedding_size=16", "--scheduler", "none",
                  "--seed", "1")
        dmlsearch("export", str(out), "--top", "2")
        dmlsearch("report", str(out))
        searched = _files(out) + _files(Path(ray_tmp))  # Ray's session logs too
        assert {p.name for p in searched} >= {"mlflow.db", "optuna.db", "best_config.yaml",
                                              "summary.json", "search.yaml", "report.md",
                                              "best_config-2.yaml", "result.json",
                                              "params.json", "runtime_env_agent.log"}
        assert any("ray" in p.parts for p in _files(out))  # Ray Tune's trial folders
        needles = {name: value.encode() for name, value in values.items()}
        needles["private key"] = private_key.encode()
        leaks = [f"{name} in {path}" for path in searched for name, needle in needles.items()
                 if needle in path.read_bytes()]
        leaks += [f"{name} in the output of `dmlsearch {i}`" for i, text in enumerate(outputs)
                  for name, value in values.items() if value in text]
        assert leaks == []
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_yaml_is_always_loaded_safely() -> None:
    unsafe = re.compile(r"yaml\.(load|unsafe_load|full_load|load_all|unsafe_load_all)\(|"
                        r"Loader=yaml\.(Loader|UnsafeLoader|FullLoader)")
    found = [f"{path.relative_to(ROOT)}:{n}" for folder in ("search", "trainables", "spaces",
                                                            "benchmarks", "cluster")
             for path in sorted((ROOT / folder).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), start=1)
             if unsafe.search(line)]
    assert found == []


def test_the_mlflow_ui_command_binds_to_localhost() -> None:
    from dmlsearch.search.tracking import browse_command

    assert "--host 127.0.0.1" in browse_command("sqlite:////r/mlflow.db")


_LISTENING = """
import json, os
os.environ.pop("RAY_ADDRESS", None)
from dmlsearch.search import ray_backend
ray_backend.init_ray(num_cpus=1, num_gpus=0)
ports = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    with open(table) as lines:
        for row in list(lines)[1:]:
            local, state = row.split()[1], row.split()[3]
            if state == "0A":  # LISTEN
                ports.add(int(local.rsplit(":", 1)[1], 16))
ray_backend.shutdown_ray()
print(json.dumps(sorted(ports)))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc/net/tcp")
def test_a_local_search_starts_no_ray_dashboard(tmp_path: Path) -> None:
    """Ray's web dashboard (port 8265 and the next ones) is not started by a search's local
    cluster: a real ``init_ray`` in a fresh process, its listening ports read from the kernel."""
    env = {**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray", dir="/tmp")}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", _LISTENING], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ports = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert ports, "no listening port seen: Ray did not start"
    assert not ports & set(range(8265, 8265 + 51)), sorted(ports)  # dashboard + its retries


def test_ray_tune_hands_no_credentials_to_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.tune.execution import class_cache

    from dmlsearch.search import ray_backend

    handed = set(class_cache.ENV_VARS_TO_PROPAGATE)
    monkeypatch.setattr(class_cache, "ENV_VARS_TO_PROPAGATE", handed)  # restored afterwards
    assert {"AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"} <= handed  # Ray's own hand-over
    others = {n for n in handed if not n.startswith(("AWS_", "AZURE_", "GOOGLE_"))}
    ray_backend.keep_credentials_home()
    assert not {n for n in class_cache.ENV_VARS_TO_PROPAGATE if n.startswith("AWS_")}
    assert others <= class_cache.ENV_VARS_TO_PROPAGATE  # the rest of the hand-over stays
