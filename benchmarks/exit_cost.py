"""Benchmark: what a ``dmlsearch`` command spends ending its processes, with the last garbage
collection of Python's exit skipped (``search/process_end.py``, as shipped: the command's
process and its trial workers) against the same command with it (issue 34).

Each repetition starts fresh processes, the two ways interleaved and their order alternated
(this machine is shared and noisy). A process runs the real command line,
``dmlsearch.search.cli.main``; "collected" sets ``DMLSEARCH_EXIT_GC=collect`` (inherited by
the trial workers), so that Python collects everything at exit as it did before. Measured
outside the process: its whole wall-clock time, and its exit, from ``main`` returning (the
process writes the time) to the process having ended. Two commands:

- ``train DIR/best_config.yaml``: a short command that imports torch and MLflow (trains a
  finished search's export again, 1 epoch);
- ``run --trials 2 --set epochs=1 --concurrency 2``: a real search on the built-in data (Ray
  Tune, Optuna, MLflow, the retrain), fewer repetitions.

Reports each way's median seconds and IQR, and the median per-repetition ratio frozen /
collected, of the whole process and of its exit.

    python benchmarks/exit_cost.py [--repeats 10] [--run-repeats 3] [--out results.json]
    python benchmarks/exit_cost.py --tests tests/e2e/test_search.py ... [--repeats 2] [--out ...]

With ``--tests``: test files of the suite instead, each run of them a whole ``pytest`` both ways
(what the suite gains: every command and trial worker its tests start).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.hpo_measures import quantiles  # noqa: E402
from dmlsearch.search.process_end import EXIT_GC  # noqa: E402
from dmlsearch.search.replay.table import machine  # noqa: E402

WAYS = ("frozen", "collected")
_PROCESS = """
import sys, time
import dmlsearch.search.cli as cli
code = cli.main(sys.argv[1:])
sys.stderr.write("\\nmain returned at %.6f\\n" % time.time())
sys.exit(code)
"""
RUN = ("run", "--trials", "2", "--set", "epochs=1", "--concurrency", "2")


def _env(way: str) -> dict[str, str]:
    """The environment of a process of ``way`` (its trial workers inherit it)."""
    return {**os.environ, EXIT_GC: "collect" if way == "collected" else ""}


def _alternated(repeats: int) -> Iterator[tuple[int, str]]:
    """(repetition, way): both ways each repetition, their order alternated."""
    for i in range(repeats):
        yield from ((i, way) for way in (WAYS if i % 2 == 0 else tuple(reversed(WAYS))))


def one(way: str, args: list[str], cwd: Path) -> tuple[float, float]:
    """One process of ``way`` running ``dmlsearch args``: its wall-clock and exit seconds."""
    started = time.time()
    proc = subprocess.run([sys.executable, "-c", _PROCESS, *args], cwd=cwd, env=_env(way),
                          capture_output=True, text=True, check=False)
    ended = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"dmlsearch {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    returned = float(proc.stderr.rsplit("main returned at ", 1)[1].split()[0])
    return ended - started, ended - returned


def _summary(values: list[float]) -> dict[str, float]:
    median, q1, q3 = quantiles(values)
    return {"median": median, "q1": q1, "q3": q3}


def summarise(seconds: dict[str, dict[str, list[float]]],
              parts: tuple[str, ...] = ("whole", "exit")) -> dict[str, Any]:
    """Per way, the medians and IQRs of the whole process and of its exit; the per-repetition
    ratios frozen / collected of both."""
    out: dict[str, Any] = {}
    for part in parts:
        out[part] = {way: _summary(seconds[way][part]) for way in WAYS}
        out[part]["ratio_frozen_over_collected"] = _summary(
            [a / b for a, b in zip(seconds["frozen"][part], seconds["collected"][part],
                                   strict=True)])
    return out


def measure(command: list[str], repeats: int, cwd: Path,
            folder: Callable[[int, str], list[str]] = lambda i, way: []) -> dict[str, Any]:
    """``repeats`` repetitions of ``dmlsearch command`` each way (``folder``: the arguments a
    repetition adds, a search's own results folder)."""
    seconds: dict[str, dict[str, list[float]]] = {w: {"whole": [], "exit": []} for w in WAYS}
    for i, way in _alternated(repeats):
        whole, exit_ = one(way, [*command, *folder(i, way)], cwd)
        seconds[way]["whole"].append(whole)
        seconds[way]["exit"].append(exit_)
    return {"command": "dmlsearch " + " ".join(command), "repeats": repeats, "seconds": seconds,
            **summarise(seconds)}


def suite(files: list[str], repeats: int) -> dict[str, Any]:
    """Test files of the suite, ``python -m pytest -q FILES`` in the repository, both ways
    alternated ``repeats`` times: each run's whole wall-clock time."""
    seconds: dict[str, dict[str, list[float]]] = {w: {"whole": []} for w in WAYS}
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
               *files]
    for i, way in _alternated(repeats):
        started = time.time()
        proc = subprocess.run(command, cwd=REPO, env=_env(way), capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"the tests failed ({way}):\n{proc.stdout[-3000:]}")
        seconds[way]["whole"].append(time.time() - started)
        print(f"  tests {i} {way}: {seconds[way]['whole'][-1]:.1f} s", flush=True)
    return {"command": "python -m pytest -q " + " ".join(files), "repeats": repeats,
            "seconds": seconds, **summarise(seconds, ("whole",))}


def _print(name: str, body: dict[str, Any]) -> None:
    print(f"{name}: {body['command']} ({body['repeats']} repetitions)")
    for part in ("whole", "exit"):
        if part not in body:
            continue
        s = body[part]
        r = s["ratio_frozen_over_collected"]
        print(f"  {part:>5}: frozen {s['frozen']['median']:.2f} s "
              f"(IQR {s['frozen']['q1']:.2f}-{s['frozen']['q3']:.2f}), collected "
              f"{s['collected']['median']:.2f} s (IQR {s['collected']['q1']:.2f}-"
              f"{s['collected']['q3']:.2f}); ratio {r['median']:.3f} "
              f"(IQR {r['q1']:.3f}-{r['q3']:.3f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10, help="of the short command")
    parser.add_argument("--run-repeats", type=int, default=3, help="of the search")
    parser.add_argument("--tests", nargs="+", default=None, metavar="FILE",
                        help="instead: these test files, --repeats times each way")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    body = measure_tests(args.tests, args.repeats) if args.tests else measure_commands(args)
    body["machine"] = machine()  # as a learning-curve table names it (the CPU's model)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(body, indent=2))
    return 0


def measure_tests(files: list[str], repeats: int) -> dict[str, Any]:
    body = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "tests": suite(files, repeats)}
    _print("tests", body["tests"])
    return body


def measure_commands(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="exit-cost-") as tmp:
        cwd = Path(tmp)
        one("frozen", [*RUN, "--out", str(cwd / "finished")], cwd)  # what train trains
        body: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        body["train"] = measure(["train", str(cwd / "finished" / "best_config.yaml")],
                                args.repeats, cwd,
                                lambda i, way: ["--out", str(cwd / f"train{i}-{way}")])
        _print("train", body["train"])
        body["run"] = measure(list(RUN), args.run_repeats, cwd,
                              lambda i, way: ["--out", str(cwd / f"run{i}-{way}")])
        _print("run", body["run"])
    return body


if __name__ == "__main__":
    sys.exit(main())
