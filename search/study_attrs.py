"""Names of the user attributes dmlsearch writes on Optuna trials (``optuna.db``), in one place:
the searcher writes them; `search.ray_backend`, the importance analysis and the tests read
them."""

from __future__ import annotations

__all__ = ["FULL_LENGTH", "RAY_TRIAL_ID", "REASON", "REPEAT_OF"]

RAY_TRIAL_ID = "ray_trial_id"  # the Ray Tune trial it was asked for
REASON = "dmlsearch_reason"  # why the trial failed
FULL_LENGTH = "dmlsearch_full_length"  # its Ray trial trained to the last epoch
REPEAT_OF = "dmlsearch_repeat_of"  # the number of the trained trial whose configuration it repeats
