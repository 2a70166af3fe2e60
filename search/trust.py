"""How much search is enough to trust its pick, in one place: the closing summary's warning
(``reporting/sections.trust_lines``) and the default budget of ``dmlsearch run`` (``prepare``)
read the same rule, so the advertised default never trips the warning for its budget.

The rule comes from the search benchmark (docs/benchmarks.md, "Search efficiency"): searches
with fewer than :data:`TRUST_WORTH_PER_SETTING` full trainings' worth of epochs per searched
setting often picked a configuration outside the best 5% of the space, and a pick among fewer
than :data:`TRUST_FULL_TRIALS` trials that trained to their end is the best of a handful.
"""

from __future__ import annotations

import math

__all__ = ["MIN_DEFAULT_TRIALS", "TRUST_FULL_TRIALS", "TRUST_WORTH_PER_SETTING",
           "default_trials", "trusted_worth"]

TRUST_FULL_TRIALS = 3
TRUST_WORTH_PER_SETTING = 2.0
MIN_DEFAULT_TRIALS = 10  # the default budget is never smaller than this many trainings' worth


def trusted_worth(searched: int) -> float:
    """Full trainings' worth of epochs a search of ``searched`` settings needs to be trusted."""
    return TRUST_WORTH_PER_SETTING * searched


def default_trials(searched: int) -> int:
    """``--trials`` when it is not given: the budget the summary trusts for a space that searches
    ``searched`` settings (at least :data:`MIN_DEFAULT_TRIALS`); the quick start's 7 settings:
    14."""
    return max(MIN_DEFAULT_TRIALS, math.ceil(trusted_worth(searched)))
