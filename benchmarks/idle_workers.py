"""What Ray's idle workers cost a search: ``dmlsearch run`` with Ray's default (one idle worker
per CPU started when the driver connects, which Ray Tune's trials never use: each trial's actor
has a runtime environment, so Ray starts a worker for it) against the product's start without
them, alternated in one job, each a fresh results folder and Ray; wall time and CPU seconds of
every process the command starts (``suite_census.census``)::

    python benchmarks/idle_workers.py --repeats 10 \\
        --out benchmarks/results/idle_workers_cpu_2026-11-29.json

Linux only (reads /proc). Used for issue 34 (docs/benchmarks.md, orchestration).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `benchmarks.` as a script too
from benchmarks.suite_census import census  # noqa: E402

VARIABLE = "RAY_prestart_worker_first_driver"
WAYS = {"ray default (idle workers)": "1", "dmlsearch (none)": None}
SEARCH = ("run", "--trials", "4", "--concurrency", "2", "--set", "epochs=1", "--no-retrain")


def _alternated(repeats: int) -> Iterator[tuple[int, str]]:
    """Each repetition runs both ways, the first way first in even repetitions."""
    names = list(WAYS)
    for rep in range(repeats):
        for name in names if rep % 2 == 0 else names[::-1]:
            yield rep, name


def one(name: str, root: Path) -> dict[str, Any]:
    """One search the named way, in its own folder, cache and Ray temp folder."""
    value = WAYS[name]
    if value is None:
        os.environ.pop(VARIABLE, None)
    else:
        os.environ[VARIABLE] = value
    folder = Path(tempfile.mkdtemp(prefix="run", dir=root))
    os.environ["DMLSEARCH_CACHE"] = str(root / "cache")  # drawn once, by the warm-up
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="r", dir="/tmp")
    result = census([sys.executable, "-m", "dmlsearch.search.cli", *SEARCH,
                     "--out", str(folder / "results")], stdout=subprocess.DEVNULL)
    if result["returncode"] != 0:
        raise SystemExit(f"the search failed ({name}): exit {result['returncode']}")
    workers = result["kinds"].get("ray trial worker", {})
    return {"way": name, "wall_s": round(result["wall_seconds"], 2),
            "cpu_s": round(result["cpu_seconds"], 2),
            "ray_worker_processes": workers.get("processes", 0),
            "ray_worker_cpu_s": round(workers.get("cpu_seconds", 0.0), 2)}


def summarise(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians per way, and the paired ratios (product / Ray's default) per repetition."""
    base, mine = list(WAYS)
    by = {(r["rep"], r["way"]): r for r in runs}
    reps = sorted({r["rep"] for r in runs})
    out: dict[str, Any] = {}
    for key in ("wall_s", "cpu_s", "ray_worker_processes"):
        ratios = [by[rep, mine][key] / by[rep, base][key] for rep in reps]
        out[key] = {way: statistics.median(by[rep, way][key] for rep in reps) for way in WAYS}
        out[key]["ratio_median"] = round(statistics.median(ratios), 3)
        out[key]["ratio_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=4, help="repetitions of both ways")
    parser.add_argument("--out", type=Path, required=True, help="the results (.json)")
    args = parser.parse_args(argv)
    if not Path("/proc/self/stat").exists():
        parser.error("reads Linux's /proc; this system has none")
    root = Path(tempfile.mkdtemp(prefix="idle-workers"))
    one("dmlsearch (none)", root)  # warm-up: draws the built-in data into the cache; not kept
    runs = []
    for rep, name in _alternated(args.repeats):
        runs.append({"rep": rep, **one(name, root)})
        print(json.dumps(runs[-1]), flush=True)
    from dmlsearch.search.replay.table import machine

    result = {"command": " ".join(["dmlsearch", *SEARCH]), "machine": machine(),
              "runs": runs, "summary": summarise(runs)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
