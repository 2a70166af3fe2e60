"""What MLflow 3's job runner costs an ``mlflow server`` that dmlsearch logs to: the server started
with and without ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``, alternated, each on a fresh SQLite
store; the seconds until ``/health`` answers, and the processes and CPU seconds of the server's
process tree 10 s after it answered (when the job runner's consumers have started)::

    python benchmarks/mlflow_server_start.py --repeats 3 \
        --out benchmarks/results/mlflow_server_start_cpu_2026-11-28.json

Linux only (reads /proc). Used for issue 34 and docs/guide/results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `benchmarks.` as a script too
from benchmarks.suite_census import proc_stat  # noqa: E402

SWITCH = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"


def _tree(root: int) -> tuple[int, float]:
    """The processes under ``root`` (itself included) and their CPU seconds."""
    children: dict[int, list[tuple[int, float]]] = {}
    own = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent, _, cpu = proc_stat(pid)
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append((int(pid), cpu))
        if int(pid) == root:
            own = cpu
    count, total, stack = 1, own, [root]
    while stack:
        for pid, cpu in children.get(stack.pop(), []):
            count, total = count + 1, total + cpu
            stack.append(pid)
    return count, total


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_once(*, jobs: bool, settle: float = 10.0) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="mlflow-start-"))
    port = _free_port()
    env = {**os.environ, SWITCH: "true" if jobs else "false"}
    started = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{folder / 'server.db'}", "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.time() - started > 120:
                    raise RuntimeError("mlflow server did not start") from None
                time.sleep(0.1)
        answered = time.time() - started
        time.sleep(settle)
        processes, cpu = _tree(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    return {"jobs": jobs, "answered_seconds": answered, "processes": processes,
            "cpu_seconds": cpu}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    runs = []
    for k in range(args.repeats):  # alternated, the order flipped every repetition
        for jobs in ((True, False) if k % 2 == 0 else (False, True)):
            runs.append(start_once(jobs=jobs))
            print(json.dumps(runs[-1]), flush=True)
    summary = {}
    for jobs in (True, False):
        mine = [r for r in runs if r["jobs"] is jobs]
        summary["with_jobs" if jobs else "without_jobs"] = {
            key: statistics.median(r[key] for r in mine)
            for key in ("answered_seconds", "processes", "cpu_seconds")}
    from dmlsearch.search.replay.table import machine

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": runs, "median": summary, "machine": machine(),
                                    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
                                   indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
