"""Where a command's CPU time goes, by kind of process: every process the command starts,
however deep (a test suite's ``dmlsearch`` subprocesses, their Ray clusters, Ray's trial
workers, an ``mlflow server`` and its children), read from Linux's ``/proc`` four times a second.

A process belongs to the command when its environment holds the tag this script sets
(``DMLSEARCH_CENSUS``): Ray's daemons and workers inherit it however they were started, and other
work on the machine (another engineer's suite, a recorder) is left out. Each process is counted
by its CPU time (user + system) when last seen, so up to a quarter of a second of a process's
end is missed; kinds come from the command line::

    python benchmarks/suite_census.py --out census.json -- python -m pytest tests/search/tune

Linux only. Used for issue 34 (docs/benchmarks.md, "Where the suite's time goes").
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TAG = "DMLSEARCH_CENSUS"
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# (kind, what its command line contains), first match wins: Ray's own processes before Python's.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ray trial worker", ("default_worker.py", "ray::")),
    ("ray daemon", ("gcs_server", "raylet", "log_monitor", "dashboard", "runtime_env",
                    "monitor.py", "ray start")),
    ("mlflow server", ("mlflow server", "mlflow.server", "huey", "uvicorn", "mlflow models")),
    # the tests' fork server (tests/forkserver.py) and its children, the commands it forks
    ("dmlsearch command", ("dmlsearch", "examples/", "forkserver.py")),
    # pytest-xdist's workers are execnet's `python -c "import sys;exec(eval(...))"` processes
    ("pytest", ("pytest", "exec(eval(sys.stdin.readline()))")),
    ("espeak-ng", ("espeak",)),
)


def kind_of(cmdline: str) -> str:
    for kind, marks in KINDS:
        if any(mark in cmdline for mark in marks):
            return kind
    return "other"


def _read(pid: str, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as handle:
        return handle.read()


def proc_stat(pid: str) -> tuple[int, str, float]:
    """A process's parent, start time (clock ticks since boot) and CPU seconds, from /proc."""
    stat = _read(pid, "stat").decode()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[1]), fields[19], (int(fields[11]) + int(fields[12])) / TICK


def _sample(tag: bytes, seen: dict[tuple[str, str], dict[str, Any]]) -> None:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            _, start, cpu = proc_stat(pid)
            key = (pid, start)  # a pid is reused; with its start time it is one process
            if key not in seen:
                if tag not in _read(pid, "environ").split(b"\0"):
                    continue
                seen[key] = {"pid": int(pid), "first": time.time(), "cmd": ""}
            entry = seen[key]
            entry["cpu"] = cpu
            if not entry["cmd"]:  # a process just forked may not have its own yet
                entry["cmd"] = _read(pid, "cmdline").replace(b"\0", b" ").decode(
                    errors="replace").strip()[:300]
        except (OSError, ValueError, IndexError):  # ended meanwhile, or not ours to read
            continue


def census(command: Sequence[str], *, interval: float = 0.25,
           stdout: int | None = None) -> dict[str, Any]:
    """Run ``command`` and return its wall time, exit code, and CPU seconds by kind;
    ``stdout``: where its output goes (``subprocess.DEVNULL``), the terminal by default."""
    value = secrets.token_hex(8)
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    started = time.time()
    proc = subprocess.Popen(list(command), env={**os.environ, TAG: value}, stdout=stdout)
    tag = f"{TAG}={value}".encode()
    while proc.poll() is None:
        _sample(tag, seen)
        time.sleep(interval)
    _sample(tag, seen)  # what is left of Ray's daemons after the command
    wall = time.time() - started
    kinds: dict[str, dict[str, float]] = {}
    for entry in seen.values():
        row = kinds.setdefault(kind_of(entry["cmd"]), {"processes": 0, "cpu_seconds": 0.0})
        row["processes"] += 1
        row["cpu_seconds"] += entry.get("cpu", 0.0)
    total = sum(row["cpu_seconds"] for row in kinds.values())
    return {"command": list(command), "returncode": proc.returncode, "wall_seconds": wall,
            "cpu_seconds": total, "cores_busy": total / wall if wall else 0.0,
            "kinds": dict(sorted(kinds.items(), key=lambda item: -item[1]["cpu_seconds"])),
            "busiest": sorted(({"cpu_seconds": e.get("cpu", 0.0), "cmd": e["cmd"]}
                               for e in seen.values()), key=lambda e: -e["cpu_seconds"])[:30]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the census (.json)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("expected a command after --, e.g. -- python -m pytest")
    if not Path("/proc/self/stat").exists():
        parser.error("reads Linux's /proc; this system has none")
    result = census(command)
    from dmlsearch.search.replay.table import machine

    result["machine"] = machine()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['wall_seconds']:.0f} s, {result['cpu_seconds']:.0f} CPU-seconds "
          f"({result['cores_busy']:.2f} cores busy on average)")
    for kind, row in result["kinds"].items():
        print(f"  {kind:18} {row['cpu_seconds']:8.1f} CPU-s in {row['processes']:4d} processes")
    return int(result["returncode"] != 0)


if __name__ == "__main__":
    sys.exit(main())
