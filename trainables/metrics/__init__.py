"""How a model is scored (Psomas 2020 §3.3; Musgrave et al. 2020): metric names and directions,
retrieval and verification metrics, the learned distance's diagnostics, and the evaluation of a
model on an image set.

This ``__init__`` is light (no torch, no faiss): it gives the metric names and their direction,
which the driver and the reports need. The heavy parts are imported from their modules:

- :mod:`.names` — metric names, :func:`metric_mode`, :func:`ks_for_metric` (re-exported here);
- :mod:`.retrieval` — Recall@k, P@1, R-Precision, MAP@R, NMI with faiss (``_knn``, ``_inputs``);
- :mod:`.roc` — EER and AUC of scored pairs (NumPy);
- :mod:`.verification` — which pairs are verification trials and how they are scored;
- :mod:`.diagnostics` — how far a learned pseudo-distance is from a metric;
- :mod:`.evaluate` — embed an image set with a model and score it.
"""

from __future__ import annotations

from dmlsearch.trainables.metrics.names import DEFAULT_KS
from dmlsearch.trainables.metrics.names import SCORINGS
from dmlsearch.trainables.metrics.names import VERIFICATION_METRICS
from dmlsearch.trainables.metrics.names import is_verification_metric
from dmlsearch.trainables.metrics.names import ks_for_metric
from dmlsearch.trainables.metrics.names import metric_mode

__all__ = ["DEFAULT_KS", "SCORINGS", "VERIFICATION_METRICS", "is_verification_metric",
           "ks_for_metric", "metric_mode"]
