"""Nothing exposed: credentials in the environment never reach the results (MLflow's store and
artifacts, Optuna's study, Ray Tune's trial folders and logs, the exports, the report), Ray's own
session logs, or what the commands print; YAML is loaded safely. (No Ray dashboard:
tests/search/tune/test_ray_runtime.py; the MLflow UI on 127.0.0.1: tests/search/test_tracking.py.)"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers import REPO as ROOT
from tests.helpers import cli_command

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
        proc = subprocess.run(cli_command(*args), env=env,
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
