"""What the suite's fork server saves (issue 34): the same test files run with the ``dmlsearch``
commands forked from one process that has imported them already (``tests/forkserver.py``) and
as real subprocesses (``DMLSEARCH_TEST_FORK=0``), the two ways alternated in order, each
repetition in the same job, so that the host's drift falls on both.

    python benchmarks/forked_commands.py --repeats 2 \\
        --out benchmarks/results/forked_commands_cpu_DATE.json \\
        tests/e2e/test_grid_pareto.py tests/e2e/test_plugins.py tests/e2e/test_kfold_preview.py

Reports per way the wall seconds of each pytest run, their medians, and per repetition the
ratio forked / subprocess (below 1: the fork server saves time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WAYS = {"subprocess": "0", "forked": "1"}


def _alternated(repeats: int) -> Iterator[tuple[int, str]]:
    """(repetition, way): both ways each repetition, their order alternated."""
    ways = tuple(WAYS)
    for i in range(repeats):
        yield from ((i, way) for way in (ways if i % 2 == 0 else ways[::-1]))


def one(way: str, tests: list[str]) -> float:
    """One pytest run of ``tests`` the way ``way`` starts commands: its wall-clock seconds."""
    env = {**os.environ, "DMLSEARCH_TEST_FORK": WAYS[way]}
    started = time.monotonic()
    # one pytest process (-n 0): what the fork server saves, not what two workers share
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p",
                           "no:cacheprovider", *tests], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"pytest ({way}) failed:\n{proc.stdout[-3000:]}")
    return seconds


def main(argv: list[str] | None = None) -> None:
    from dmlsearch.search.replay.table import machine

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("tests", nargs="+", help="test files or node ids")
    args = parser.parse_args(argv)
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    for i, way in _alternated(args.repeats):
        seconds[way].append(one(way, args.tests))
        print(f"repetition {i + 1}: {way} {seconds[way][-1]:.1f} s", flush=True)
    ratios = [f / s for f, s in zip(seconds["forked"], seconds["subprocess"], strict=True)]
    result: dict[str, Any] = {
        "tests": args.tests, "repeats": args.repeats, "seconds": seconds,
        "median_seconds": {way: median(v) for way, v in seconds.items()},
        "ratio_forked_to_subprocess": ratios, "median_ratio": median(ratios),
        "machine": machine(),  # as a learning-curve table names it (the CPU's model)
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("median_seconds", "ratio_forked_to_subprocess")}))


if __name__ == "__main__":
    main()
