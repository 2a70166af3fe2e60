"""The search benchmark on the simulated clock (``benchmarks/search_efficiency.py --clock
virtual``): a sweep run through the clock trains the points and reaches the pick that the
sweep computed from the table does (the slow, obvious reference), a simulated search is the same
twice, a resumed run reads only its own clock's searches, and the comparison of concurrencies
renders what the summaries hold."""

from __future__ import annotations

import json
import math
from pathlib import Path

from benchmarks.search_efficiency import _logged_runs
from benchmarks.search_efficiency import _simulated
from benchmarks.search_efficiency import _sweep
from benchmarks.search_efficiency import concurrency_markdown
from benchmarks.search_efficiency import pick_within
from benchmarks.search_efficiency import reference
from benchmarks.search_efficiency import run_method


def _points(run: dict, searched: set[str]) -> list[tuple]:
    return sorted(tuple(sorted((k, v) for k, v in c.items() if k in searched))
                  for c in run["configs"])


def test_the_clocks_sweep_trains_what_the_computed_sweep_trains() -> None:
    ref = reference("omniglot-grid")
    computed = _sweep("omniglot-grid", "sweep", 0, 4)
    clocked = _simulated("omniglot-grid", "sweep", 0, 20, 4)
    assert _points(clocked, ref.searched) == _points(computed, ref.searched)
    assert len(clocked["events"]) == len(computed["events"])  # every point to its end
    assert clocked["completed"] == computed["completed"] == clocked["trials"]
    assert pick_within(clocked, math.inf, ref) == pick_within(computed, math.inf, ref)


def test_a_simulated_search_of_the_benchmark_is_the_same_twice() -> None:
    first = run_method("omniglot-grid", "prior-tpe+asha", 2, 3, 2, 200.0, "virtual")
    again = run_method("omniglot-grid", "prior-tpe+asha", 2, 3, 2, 200.0, "virtual")
    assert first["events"] == again["events"] and first["configs"] == again["configs"]
    assert len(first["events"]) >= 3 * reference("omniglot-grid").epochs  # the budget, spent
    assert first["budget_spent_at"] is not None
    assert first["simulated_seconds"] > first["budget_spent_at"] > 0


def test_a_resumed_run_reads_only_its_own_clocks_searches(tmp_path: Path) -> None:
    log = tmp_path / "x.runs.jsonl"
    lines = [{"budget": 3, "concurrency": 4, "events": [[0.5, 1]]},  # before clocks: Ray's
             {"budget": 3, "concurrency": 2, "clock": "virtual", "events": []},
             {"budget": 3, "concurrency": 8, "clock": "virtual", "events": []},
             {"budget": 4, "concurrency": 2, "clock": "virtual", "events": []}]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines) + "{cut")
    assert len(_logged_runs(log, 3, [4], "ray")) == 1
    assert [r["concurrency"] for r in _logged_runs(log, 3, [2, 4], "virtual")] == [2]
    assert _logged_runs(log, 3, [4], "ray")[0]["events"] == [(0.5, 1)]


def test_the_concurrencies_are_compared_method_by_method() -> None:
    def method(regret: float, to_top: float) -> dict:
        return {"seeds": 4, "reached_top5": 3, "median_epochs_to_top5": to_top,
                "iqr_epochs_to_top5": [to_top - 1, to_top + 1],
                "regret_at": {str(f): {"mean": regret * f, "low": regret * f - 0.01,
                                       "high": regret * f + 0.01} for f in (0.25, 1.0)}}

    def part(scale: float) -> dict:
        return {"tables": {"grid": {"methods": {"random": method(0.4 * scale, 50 * scale),
                                                "tpe+asha": method(0.2 * scale, 30)}}}}

    body = {"clock": "virtual", "budget_trials": 20, "seeds": 4, "default_method": "tpe+asha",
            "by_concurrency": {"2": part(1.0), "8": part(2.0)}}
    text = concurrency_markdown(body)
    assert text.startswith("Clock: virtual; budget 20 full trainings' worth; 4 seeds")
    rows = [line for line in text.splitlines() if line.startswith("| grid")]
    assert rows[0] == ("| grid | random | 0.100 [0.090, 0.110] | 0.200 [0.190, 0.210] | 0.400 | "
                       "0.800 | 50 (49–51), 3/4 | 100 (99–101), 3/4 |")
    assert rows[1].startswith("| grid | **tpe+asha** | 0.050 [0.040, 0.060] |")
