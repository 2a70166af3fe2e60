"""What a person sees while a search runs, drawn with ``rich``.

On a terminal: a live status line under the finished trials (trials done / running / pruned /
failed of N, the best so far with its key parameters, elapsed time and about how long is left).
Without a terminal (a log, CI, ``ray submit``): one line per finished trial, nothing redrawn.
Long steps after the search (retrain, fold ensemble, importance) say when they start and end.
The search's trial events reach it as they reach the MLflow tracker (it is a ``TrialEvents``).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from dmlsearch.search.process_end import end_on_closed_output
from dmlsearch.search.reporting.tables import fmt
from dmlsearch.search.tune.study import trial_name

__all__ = ["SearchProgress", "elapsed"]


def elapsed(seconds: float) -> str:
    """``1:05`` or ``1:02:03``."""
    seconds = int(max(0.0, seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class _Console(Console):
    """rich's console, ending the process with the same code as the command line when the
    reader of the output left (rich's own ends it with 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise SystemExit(end_on_closed_output())


class SearchProgress:
    """A search's progress on ``stream`` (live when it is a terminal, else line by line)."""

    def __init__(self, stream: TextIO, *, trials: int | None, metric: str, mode: str,
                 searched: Sequence[str], concurrency: int, max_iterations: int,
                 live: bool | None = None, epoch_budget: int | None = None,
                 group: str | None = None) -> None:
        """``trials``: how many the search runs (None: as many as its budget allows);
        ``epoch_budget``: the epochs it may train in all (shown, and the time left estimated
        from it); ``group``: a configuration key whose values keep their own best (a
        comparison's ``method``)."""
        self.console = _Console(file=stream, highlight=False, soft_wrap=True)
        self.live_enabled = self.console.is_terminal if live is None else live
        self.trials, self.metric, self.mode = trials, metric, mode
        self.searched = list(searched)  # every searched value of a trial's branch is shown
        self.concurrency, self.max_iterations = max(1, concurrency), max_iterations
        self.started = time.time()
        self.configs: dict[str, dict[str, Any]] = {}
        self.iterations: dict[str, int] = {}
        self.scores: dict[str, float] = {}
        self.running: set[str] = set()
        self.ended: dict[str, int] = {"completed": 0, "pruned": 0, "failed": 0}
        self.best: tuple[float, str] | None = None
        self.epoch_budget, self.group = epoch_budget, group
        self.group_best: dict[str, tuple[float, str]] = {}
        self._live: Live | None = None

    # ---- the search's trial events ----------------------------------------------------------
    def trial_started(self, trial_id: str, config: dict[str, Any]) -> None:
        self.configs.setdefault(trial_id, dict(config))
        self.running.add(trial_id)
        self._refresh()

    def trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.iterations[trial_id] = int(result.get("training_iteration", 0) or 0)
        score = result.get("score")
        if isinstance(score, (int, float)) and math.isfinite(score):
            self.scores[trial_id] = float(score)
        self._refresh()

    def trial_finished(self, trial_id: str, state: str, reason: str | None) -> None:
        self.running.discard(trial_id)
        self.ended[state] = self.ended.get(state, 0) + 1
        score = self.scores.get(trial_id)
        if state == "completed" and score is not None:
            if self._better(score, self.best):
                self.best = (score, trial_id)
            if self.group is not None:
                key = str(self.configs.get(trial_id, {}).get(self.group))
                if self._better(score, self.group_best.get(key)):
                    self.group_best[key] = (score, trial_id)
        self.line(self._finished_line(trial_id, state, reason))
        self._refresh()

    def _better(self, score: float, best: tuple[float, str] | None) -> bool:
        return best is None or (score > best[0] if self.mode == "max" else score < best[0])

    # ---- lines and steps ----------------------------------------------------------------------
    def line(self, text: str) -> None:
        """A line of the log, above the live status on a terminal."""
        self.console.print(text, markup=False, highlight=False)

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[list[str]]:
        """A long step after the search: said when it starts, and how long it took, with what
        the block appended to the list it is given (what it did, or skipped and why)."""
        started = time.time()
        outcome: list[str] = []
        if self.live_enabled:
            with self.console.status(what + " ...", spinner="dots"):
                yield outcome
        else:
            self.line(what + " ...")
            yield outcome
        self.line(f"{what}: done in {elapsed(time.time() - started)}"
                  + "".join(f"; {said}" for said in outcome if said))

    def __enter__(self) -> SearchProgress:
        if self.live_enabled:
            # Not rich's redirection of stdout/stderr: Ray's output goes to its log file.
            self._live = Live(_Status(self), console=self.console, refresh_per_second=4,
                              transient=True, redirect_stdout=False, redirect_stderr=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    # ---- rendering ----------------------------------------------------------------------------
    def _done(self) -> int:
        return sum(self.ended.values())

    def _epochs(self) -> int:
        return sum(self.iterations.values())

    def _best_text(self, trial_id: str) -> str:
        """The best so far (of the trial's group, with ``group``)."""
        if self.group is None:
            return (f"best {self.best[0]:.4f} ({trial_name(self.best[1])})" if self.best
                    else "no trial completed yet")
        key = str(self.configs.get(trial_id, {}).get(self.group))
        best = self.group_best.get(key)
        return (f"best of {key} {best[0]:.4f} ({trial_name(best[1])})" if best
                else f"no trial of {key} completed yet")

    def _params(self, trial_id: str) -> str:
        config = self.configs.get(trial_id, {})
        return ", ".join(f"{k}={fmt(config[k])}" for k in self.searched if k in config)

    def _finished_line(self, trial_id: str, state: str, reason: str | None) -> str:
        done = self._done()
        if self.trials is None:
            head = f"[{done}] trial {trial_name(trial_id)} "
        else:
            width = len(str(self.trials))
            head = f"[{done:>{width}}/{self.trials}] trial {trial_name(trial_id)} "
        score = self.scores.get(trial_id)
        if state == "failed":
            body = f"failed: {reason or 'no reason given'}"
        else:
            when = (f"pruned at epoch {self.iterations.get(trial_id, 0)} of "
                    f"{self.max_iterations}" if state == "pruned" else "completed")
            body = f"{when}: val {self.metric} {'-' if score is None else f'{score:.4f}'}"
        params = self._params(trial_id)
        budget = (f"; {self._epochs()}/{self.epoch_budget} epochs"
                  if self.epoch_budget else "")
        return (f"{head}{body}" + (f" ({params})" if params else "")
                + f"; {self._best_text(trial_id)}{budget}; "
                + elapsed(time.time() - self.started))

    def _status(self) -> Table:
        done, spent = self._done(), time.time() - self.started
        left, epochs = "", self._epochs()
        if self.epoch_budget and 0 < epochs < self.epoch_budget:
            left = f", about {elapsed(spent / epochs * (self.epoch_budget - epochs))} left"
        elif self.trials is not None and done and done < self.trials:
            left = f", about {elapsed(spent / done * (self.trials - done))} left"
        if self.group is not None:
            best = ", ".join(f"{k} {v[0]:.4f}" for k, v in sorted(self.group_best.items())) \
                or "none completed yet"
        else:
            best = "none completed yet" if self.best is None else (
                f"{self.best[0]:.4f} (trial {trial_name(self.best[1])})")
        count = f"{done}" if self.trials is None else f"{done}/{self.trials}"
        budget = f" | {epochs}/{self.epoch_budget} epochs" if self.epoch_budget else ""
        line = Table.grid(padding=(0, 1))
        line.add_row(Spinner("dots"), Text(
            f"{count} trials done: {self.ended['completed']} completed, "
            f"{self.ended['pruned']} pruned, {self.ended['failed']} failed; "
            f"{len(self.running)} running{budget} | best val {self.metric} {best} | "
            f"{elapsed(spent)} elapsed{left}"))
        return line

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.refresh()


class _Status:
    """The live status line, rendered afresh at every refresh (the clock moves)."""

    def __init__(self, progress: SearchProgress) -> None:
        self.progress = progress

    def __rich__(self) -> Table:
        return self.progress._status()
