"""What a worker runs: data, models, losses, metrics, the fit loop and the protocols.

Plain PyTorch: nothing here imports Ray, Optuna or MLflow. This ``__init__`` stays light (no
torch import) so that configuration and errors can be used by ``spaces`` and the CLI cheaply;
import the heavy parts from their modules (``trainables.fit``, ``trainables.metrics``, ...).
"""

from __future__ import annotations

from dmlsearch.trainables.errors import TrialFailed
from dmlsearch.trainables.errors import UserError

__all__ = ["TrialFailed", "UserError"]
