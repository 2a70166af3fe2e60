"""dmlsearch from Python: the command line's twin.

    import dmlsearch

    result = dmlsearch.run("quickstart", trials=6, out="results")   # dmlsearch run
    result.best_config, result.test_metrics, result.trials          # a pandas DataFrame
    dmlsearch.compare(methods=["proxy_anchor", "multi_similarity"], trials=4)
    dmlsearch.resume("results"); dmlsearch.train("results/export/best_config.yaml")
    dmlsearch.importance("results"); dmlsearch.results("results")   # a finished search, read

Each function takes the command's options as keywords (the command line's ``--time-budget``
is ``time_budget_s``, ``--set k=v`` is ``set={"k": v}``), runs the same checks, and raises
:class:`UserError` with the command line's one-line message where the command would exit with
code 2; nothing here exits the interpreter. Importing this package imports neither torch nor Ray.
"""

from __future__ import annotations

from dmlsearch._api import compare
from dmlsearch._api import importance
from dmlsearch._api import results
from dmlsearch._api import resume
from dmlsearch._api import run
from dmlsearch._api import train
from dmlsearch._results import ComparisonResult
from dmlsearch._results import SearchResult
from dmlsearch._results import TrainResult
from dmlsearch.trainables.errors import UserError

__all__ = ["ComparisonResult", "SearchResult", "TrainResult", "UserError", "compare",
           "importance", "results", "resume", "run", "train"]
