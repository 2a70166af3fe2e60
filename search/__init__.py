"""The driver: CLI, Ray Tune + Optuna assembly, MLflow tracking, retrain and export."""

from __future__ import annotations

__all__: list[str] = []
