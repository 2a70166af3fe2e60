"""Learning-curve tables and replayed searches: the one interface the rest of dmlsearch uses.

A table holds every point of a grid space trained for real, once, with every epoch's validation
metrics and times and the test metrics of each epoch's selected model; ``dmlsearch
record-curves`` records it and ``dmlsearch run --replay`` replays it (which compares search
methods over many seeds in minutes, before GPU-hours are spent on one).

- :mod:`.table` — the format (JSON lines), written and read: :class:`CurveTable`, :class:`Curve`;
- :mod:`.lookup` — the curve a configuration replays, the spaces a table answers;
- :mod:`.noise` — training noise in a replay (off unless asked): a trial's draw of its
  configuration's recorded seeds, or of noise fitted to the table's seed-to-seed spread;
- :mod:`.progress` — a replayed trial's epochs, as a training trial reports them;
- :mod:`.recording` — recording a table, in worker processes; :mod:`.curve` — one training.

Importing this package imports neither torch nor Ray.
"""

from __future__ import annotations

from dmlsearch.search.replay.epochs import ReplayedEpoch
from dmlsearch.search.replay.epochs import replay_epochs
from dmlsearch.search.replay.epochs import replayed_test_metrics
from dmlsearch.search.replay.lookup import check_space
from dmlsearch.search.replay.lookup import lookup
from dmlsearch.search.replay.lookup import snap
from dmlsearch.search.replay.noise import SeedNoise
from dmlsearch.search.replay.noise import draw_curve
from dmlsearch.search.replay.noise import fit_noise
from dmlsearch.search.replay.noise import seed_curves
from dmlsearch.search.replay.noise import seed_curves_of
from dmlsearch.search.replay.recording import check_recordable
from dmlsearch.search.replay.recording import record_table
from dmlsearch.search.replay.table import TABLE_FORMAT
from dmlsearch.search.replay.table import Curve
from dmlsearch.search.replay.table import CurveTable
from dmlsearch.search.replay.table import config_key
from dmlsearch.search.replay.table import load_table

__all__ = ["TABLE_FORMAT", "Curve", "CurveTable", "ReplayedEpoch", "SeedNoise",
           "check_recordable", "check_space", "config_key", "draw_curve", "fit_noise",
           "load_table", "lookup", "record_table", "replay_epochs", "replayed_test_metrics",
           "seed_curves", "seed_curves_of", "snap"]
