"""``dmlsearch compare``: fair comparisons of DML methods.

This face exports what a comparison *is* and how its numbers are computed, all light (no Ray,
torch or matplotlib: the options read :data:`DEMO_METHODS` and :data:`TESTS` when
``dmlsearch --help`` runs): the methods and their shared settings (:mod:`.methods`), the
outcome types (:mod:`.outcome`), the statistics (:mod:`.stats`, :mod:`.analysis`). The command
itself, :mod:`.comparison` (``run_comparison``, ``resume_comparison``), and its files,
:mod:`.report` (with :mod:`.comparison_json`, :mod:`.comparison_md`, :mod:`.figures`), are
imported from their modules when the command runs.
"""

from __future__ import annotations

from dmlsearch.search.compare.analysis import Analysis
from dmlsearch.search.compare.analysis import analyse
from dmlsearch.search.compare.analysis import metric_label
from dmlsearch.search.compare.analysis import reported_metrics
from dmlsearch.search.compare.methods import DEMO_METHODS
from dmlsearch.search.compare.methods import FAIR_KEYS
from dmlsearch.search.compare.methods import Method
from dmlsearch.search.compare.methods import method_names
from dmlsearch.search.compare.methods import resolve_methods
from dmlsearch.search.compare.methods import shared_settings
from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.outcome import MethodOutcome
from dmlsearch.search.compare.stats import ALPHA
from dmlsearch.search.compare.stats import TESTS
from dmlsearch.search.compare.stats import MeanCI
from dmlsearch.search.compare.stats import MethodRank
from dmlsearch.search.compare.stats import PairTest

__all__ = ["ALPHA", "DEMO_METHODS", "FAIR_KEYS", "TESTS", "Analysis", "Comparison", "MeanCI",
           "Method", "MethodOutcome", "MethodRank", "PairTest", "analyse", "metric_label",
           "method_names", "reported_metrics", "resolve_methods", "shared_settings"]
