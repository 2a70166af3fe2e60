"""No network at run time (docs/design.md, "No network"): MLflow 3 sends usage reports to its
servers from every process that imports it, and Ray from every cluster it starts, unless told not
to. The package imports this module before anything else, so every process of a search (the
driver, and Ray's workers, which inherit its environment) starts with both switched off. A user
who wants them sets the variable before importing dmlsearch; an MLflow imported earlier is asked
to decide again."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def _mlflow_decides_again() -> None:
    if "mlflow" not in sys.modules:
        return  # it reads the variable when it is imported
    try:
        from mlflow.telemetry import set_telemetry_client
    except ImportError:  # an MLflow without usage reports
        return
    set_telemetry_client()


_mlflow_decides_again()
