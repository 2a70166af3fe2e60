"""After the search: the best configurations retrained on all training classes and tested once,
logged to MLflow (:mod:`.retrain_runs`) and the exported configuration (:mod:`.export`).
Other packages import these names from here.

``dmlsearch train`` (:mod:`.train`), what a retrained model retrieves and its pictures
(:mod:`.retrievals`, :mod:`.gallery`, :mod:`.views`) need MLflow, faiss, torch or matplotlib and
are imported from their modules: ``dmlsearch export`` and ``report``, which import this
package, start without them.
"""

from __future__ import annotations

from dmlsearch.search.finish.export import EXPORT_FORMAT
from dmlsearch.search.finish.export import export_best
from dmlsearch.search.finish.export import export_study
from dmlsearch.search.finish.export import read_export
from dmlsearch.search.finish.export import write_export
from dmlsearch.search.finish.retrain_runs import GALLERY_ARTIFACTS
from dmlsearch.search.finish.retrain_runs import EnsembleOutcome
from dmlsearch.search.finish.retrain_runs import RetrainOutcome
from dmlsearch.search.finish.retrain_runs import SeedsOutcome
from dmlsearch.search.finish.retrain_runs import ensemble_and_log
from dmlsearch.search.finish.retrain_runs import retrain_config
from dmlsearch.search.finish.retrain_runs import retrain_seeds
from dmlsearch.search.finish.retrain_runs import retrain_top
from dmlsearch.search.finish.retrain_runs import train_and_log

__all__ = ["EXPORT_FORMAT", "GALLERY_ARTIFACTS", "EnsembleOutcome", "RetrainOutcome",
           "SeedsOutcome", "ensemble_and_log", "export_best", "export_study", "read_export",
           "retrain_config", "retrain_seeds", "retrain_top", "train_and_log", "write_export"]
