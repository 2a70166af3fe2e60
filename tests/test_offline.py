"""No network at run time: importing dmlsearch switches off MLflow's usage reports (MLflow 3
posts them to its servers from any process that imports it, outside CI) and Ray's, unless the
user asked for them; an MLflow imported before dmlsearch is switched off too.

Each check runs in a fresh interpreter with an environment that names no CI and no test run
(MLflow stays quiet under either by itself, which would hide the switch), and with every HTTP
request sent to a closed local port, so that a failing check cannot reach the network either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import free_port

_REPORT = """
import json, os, sys
{imports}
from mlflow.telemetry import get_telemetry_client
print(json.dumps({{"client": get_telemetry_client() is not None,
                   "mlflow": os.environ.get("MLFLOW_DISABLE_TELEMETRY"),
                   "ray": os.environ.get("RAY_USAGE_STATS_ENABLED")}}))
"""


def _report(imports: str, tmp_path: Path, **env: str) -> dict[str, object]:
    closed = f"http://127.0.0.1:{free_port()}"
    clean = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "LANG": "C.UTF-8",
             "HTTP_PROXY": closed, "HTTPS_PROXY": closed, "http_proxy": closed,
             "https_proxy": closed, **env}
    proc = subprocess.run([sys.executable, "-c", _REPORT.format(imports=imports)], env=clean,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("imports", ["import dmlsearch\nimport mlflow",
                                     "import mlflow\nimport dmlsearch"],
                         ids=["dmlsearch first", "mlflow first"])
def test_importing_dmlsearch_switches_usage_reports_off(imports: str, tmp_path: Path) -> None:
    assert _report(imports, tmp_path) == {"client": False, "mlflow": "true", "ray": "0"}


def test_without_dmlsearch_this_environment_would_report(tmp_path: Path) -> None:
    """The check above can fail: in the same environment MLflow alone starts its reporter."""
    assert _report("import mlflow", tmp_path)["client"] is True


def test_a_user_who_asks_for_usage_reports_keeps_them(tmp_path: Path) -> None:
    got = _report("import dmlsearch\nimport mlflow", tmp_path, MLFLOW_DISABLE_TELEMETRY="false",
                  RAY_USAGE_STATS_ENABLED="1")
    assert got == {"client": True, "mlflow": "false", "ray": "1"}
