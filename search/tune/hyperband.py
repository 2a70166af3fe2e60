"""Synchronous HyperBand (``--scheduler hyperband``): Ray Tune's scheduler, with one repair.

Ray's ``HyperBandScheduler`` pauses a trial that reaches its bracket's milestone until every
other live trial of the bracket reaches it too, then halves the bracket (or, at the last
milestone, ends it). When a trial leaves a bracket by any other way (it failed: a NaN loss, out
of memory; or it ended on its own), the trials paused waiting for it must go on, but Ray (2.60)
processes the bracket again only if the bracket is not finished and its ``is_being_processed``
flag is down, a flag it raises the first time the bracket is processed and never lowers. So when
a trial fails after its bracket's first halving, the trials paused at the next milestone wait
for it for ever, and the search hangs with nothing running
(``tests/search/tune/test_hyperband.py``). A second, rarer stall with no failing trial was seen
in 1 of 20 replayed HyperBand searches and is not repaired here (docs/benchmarks.md). Here the
flag means what it says (it is lowered when processing ends: it only hides the removals that
processing itself causes, its bad trials being stopped), and a removal always processes the
bracket, which halves it, or, finished, stops the trials paused at its last milestone (they have
trained to the end).
"""

from __future__ import annotations

from typing import Any

from ray.tune.schedulers import HyperBandScheduler

__all__ = ["HyperBand"]


class HyperBand(HyperBandScheduler):
    """``HyperBandScheduler`` whose paused trials go on when a trial leaves their bracket."""

    def _process_bracket(self, tune_controller: Any, bracket: Any) -> str:
        try:
            return super()._process_bracket(tune_controller, bracket)
        finally:
            bracket.is_being_processed = False

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        bracket, _ = self._trial_info[trial]
        bracket.cleanup_trial(trial)
        if not bracket.is_being_processed:
            self._process_bracket(tune_controller, bracket)
