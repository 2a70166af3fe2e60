"""What a person reads and looks at, rendered from a search's summary and study: the closing
summary on the terminal (:mod:`.console`), ``report.md`` (:mod:`.markdown`) from the same
sections (:mod:`.sections`, :mod:`.tables`), the live progress (:mod:`.progress`) and the
thesis's tournament (:mod:`.tournament`). Other packages import these names from here.

The pictures and the fANOVA importance (:mod:`.plots`, :mod:`.importance`,
:mod:`.importance_plots`: matplotlib, Optuna, scikit-learn) are imported from their modules:
``dmlsearch report``, which imports this package, starts without them.
"""

from __future__ import annotations

from dmlsearch.search.reporting.console import render_summary
from dmlsearch.search.reporting.markdown import render_report
from dmlsearch.search.reporting.markdown import report_command
from dmlsearch.search.reporting.progress import SearchProgress
from dmlsearch.search.reporting.sections import note_markdown
from dmlsearch.search.reporting.tables import Table
from dmlsearch.search.reporting.tables import counted
from dmlsearch.search.reporting.tables import counted_of
from dmlsearch.search.reporting.tables import fmt
from dmlsearch.search.reporting.tables import format_metrics
from dmlsearch.search.reporting.tables import kv
from dmlsearch.search.reporting.tournament import experiment_keys
from dmlsearch.search.reporting.tournament import tournament

__all__ = ["SearchProgress", "Table", "counted", "counted_of", "experiment_keys", "fmt",
           "format_metrics", "kv",
           "note_markdown", "render_report", "render_summary", "report_command", "tournament"]
