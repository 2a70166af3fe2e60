"""Benchmark: the driver's own cost per trial as a search grows to thousands of trials (issue #15).

``dmlsearch run --replay`` (the whole driver: the searcher and its Optuna record in SQLite, Ray
Tune's controller, the MLflow tracker logging every trial, the records) with trials that take
no time: a one-epoch table derived from the learning-curve table (each configuration's first
epoch, its time set to 0). For 100, 1,000 and 3,000 trials (random sampler, no scheduler,
concurrency 4), the search phase's wall time is measured, the sampler's own time (the
``sample_*`` calls, measured in the driver) is taken out, and the rest is divided by the trials:
the driver's overhead per trial. The goal: it grows at most 2x from 100 to 3,000 trials. The
phases after the search (plots, importance, summary) are timed apart.

    python benchmarks/search_efficiency.py --overhead [--out overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SIZES = tuple(int(n) for n in os.environ.get("OVERHEAD_SIZES", "100,1000,3000").split(","))


def one_epoch_table(source: Path, target: Path) -> None:
    """``source``'s first epoch of every training, with no time: trials that cost nothing."""
    lines = source.read_text().splitlines()
    header = json.loads(lines[0])
    header["base"] = {**header["base"], "epochs": 1}
    out = [json.dumps(header)]
    for line in lines[1:]:
        try:
            run = json.loads(line)
        except json.JSONDecodeError:
            continue
        first = {**run["epochs"][0], "seconds": 0.0, "cpu_seconds": 0.0}
        out.append(json.dumps({**run, "epochs": [first], "status": "ok", "best_epoch": 1}))
    target.write_text("\n".join(out) + "\n")


def one_epoch_space(source: Path, target: Path) -> None:
    target.write_text(source.read_text().replace("  epochs: 12\n", "  epochs: 1\n"))


class _Timer:
    """Seconds spent in the wrapped methods of a class (the sampler's)."""

    def __init__(self, cls: type, names: tuple[str, ...]) -> None:
        self.seconds = 0.0
        for name in names:
            inner = getattr(cls, name)

            def timed(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return _inner(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - started
            setattr(cls, name, timed)


def measure(trials: int, table: Path, space: Path, work: Path) -> dict[str, Any]:
    import optuna

    from dmlsearch.search import run
    from dmlsearch.search.options import SearchOptions

    sampler = _Timer(optuna.samplers.RandomSampler,
                     ("sample_independent", "sample_relative", "infer_relative_search_space"))
    marks: dict[str, float] = {}
    inner = run.run_tune  # what run_search calls

    def timed_run_tune(*args: Any, **kwargs: Any) -> Any:
        marks["tune_start"] = time.time()
        try:
            return inner(*args, **kwargs)
        finally:
            marks["tune_end"] = time.time()

    run.run_tune = timed_run_tune
    try:
        opts = SearchOptions(space=str(space), sampler="random", scheduler="none",
                             trials=trials, concurrency=4, out=work / f"n{trials}",
                             retrain=False, register=False, replay=str(table),
                             replay_speedup=1e9)
        started = time.time()
        summary = run.run_search(opts, echo=lambda _line: None)
        ended = time.time()
    finally:
        run.run_tune = inner
    search = marks["tune_end"] - marks["tune_start"]
    return {"trials": len(summary.trials), "search_seconds": search,
            "sampler_seconds": sampler.seconds,
            "overhead_per_trial_s": (search - sampler.seconds) / max(1, len(summary.trials)),
            "before_search_s": marks["tune_start"] - started,
            "after_search_s": ended - marks["tune_end"], "load": os.getloadavg()}


def main(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="overhead-"))
    table, space = work / "one_epoch.jsonl", work / "one_epoch_space.yaml"
    one_epoch_table(args.table, table)
    one_epoch_space(args.space, space)
    rows = []
    for trials in SIZES:
        row = measure(trials, table, space, work)
        rows.append(row)
        print(f"{trials:5d} trials: search {row['search_seconds']:.1f} s, sampler "
              f"{row['sampler_seconds']:.1f} s, overhead {row['overhead_per_trial_s'] * 1000:.0f}"
              f" ms/trial; after the search {row['after_search_s']:.1f} s", flush=True)
    growth = rows[-1]["overhead_per_trial_s"] / rows[0]["overhead_per_trial_s"]
    print(f"overhead per trial, {SIZES[-1]} vs {SIZES[0]} trials: {growth:.2f}x (goal <= 2x)")
    if args.out:
        args.out.write_text(json.dumps({
            "sizes": rows, "growth": growth,
            "machine": {"cpu": platform.processor(), "cores": os.cpu_count()}}, indent=1))
    return 0
