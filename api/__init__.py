"""dmlsearch from Python: the command line's twin.

    import dmlsearch

    result = dmlsearch.run("quickstart", trials=6, out="results")   # dmlsearch run
    result.best_config, result.test_metrics, result.trials          # a pandas DataFrame
    dmlsearch.compare(methods=["proxy_anchor", "multi_similarity"], trials=4)
    dmlsearch.resume("results"); dmlsearch.train("results/export/best_config.yaml")
    dmlsearch.importance("results"); dmlsearch.results("results")   # a finished search, read

    @dmlsearch.register_loss("my_loss", defaults={"margin": 0.2})   # in a plug-in file
    def my_loss(*, num_classes, embedding_size, margin): ...        # returns an nn.Module
    dmlsearch.compare(["my_loss", "proxy_anchor"], plugins=["my_loss.py"])

Each function takes the command's options as keywords (the command line's ``--time-budget``
is ``time_budget_s``, ``--set k=v`` is ``set={"k": v}``), runs the same checks, and raises
:class:`UserError` with the command line's one-line message where the command would exit with
code 2; nothing here exits the interpreter. Importing this package imports neither torch nor Ray.
"""

from __future__ import annotations

from typing import Any

from dmlsearch import _offline  # noqa: F401 - first: no usage reports (MLflow, Ray)

# isort: split
from dmlsearch._api import compare
from dmlsearch._api import importance
from dmlsearch._api import results
from dmlsearch._api import resume
from dmlsearch._api import run
from dmlsearch._api import train
from dmlsearch._plugin_api import register_backbone
from dmlsearch._plugin_api import register_batch_sampler
from dmlsearch._plugin_api import register_dataset
from dmlsearch._plugin_api import register_loss
from dmlsearch._plugin_api import register_miner
from dmlsearch._results import ComparisonResult
from dmlsearch._results import SearchResult
from dmlsearch._results import TrainResult
from dmlsearch.trainables.errors import UserError

__all__ = ["ComparisonResult", "Dataset", "ImageSet", "SearchResult", "TrainResult", "UserError",
           "compare", "importance", "register_backbone", "register_batch_sampler",
           "register_dataset", "register_loss", "register_miner", "results", "resume", "run",
           "train"]


def __getattr__(name: str) -> Any:
    """``Dataset`` and ``ImageSet`` (a dataset plug-in builds them) import torch: on use."""
    if name in ("Dataset", "ImageSet"):
        from dmlsearch.trainables import data

        return getattr(data, name)
    raise AttributeError(f"module 'dmlsearch' has no attribute {name!r}")
