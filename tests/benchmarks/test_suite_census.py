"""benchmarks/suite_census.py: a command's CPU time by kind of process, its own processes only;
benchmarks/mlflow_server_start.py's count of a server's process tree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.suite_census import census
from benchmarks.suite_census import kind_of
from benchmarks.suite_census import main

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")

BUSY = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass"
# A parent that starts a busy child and is itself busy: both are the command's.
PARENT = ("import subprocess, sys\n"
          f"child = subprocess.Popen([sys.executable, '-c', {BUSY.format(seconds=0.6)!r}])\n"
          f"{BUSY.format(seconds=0.4)}\nchild.wait()")


def test_the_commands_processes_are_counted_and_nothing_else() -> None:
    outsider = subprocess.Popen([sys.executable, "-c", BUSY.format(seconds=3)])
    try:
        result = census([sys.executable, "-c", PARENT], interval=0.05)
    finally:
        outsider.kill()
        outsider.wait()
    assert result["returncode"] == 0
    rows = result["busiest"]
    assert len(rows) == 2  # the parent and its child; the busy outsider is not the command's
    parent, child = sorted(r["cpu_seconds"] for r in rows)
    assert parent >= 0.35 and child >= 0.55
    assert 0.9 <= result["cpu_seconds"] <= 1.3  # 0.4 + 0.6 s, as /proc counts them in ticks
    assert result["kinds"]["other"]["processes"] == 2


@pytest.mark.parametrize(("cmdline", "kind"), [
    ("/venv/bin/python /venv/lib/ray/_private/workers/default_worker.py --node-ip-address=1",
     "ray trial worker"),
    ("ray::ImplicitFunc.train", "ray trial worker"),
    ("/venv/lib/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/x", "ray daemon"),
    ("/venv/bin/python -m huey.bin.huey_consumer mlflow.server.jobs", "mlflow server"),
    ("/venv/bin/python -m dmlsearch.search.cli run --trials 4", "dmlsearch command"),
    ("/venv/bin/python -m pytest -q", "pytest"),
    ("/venv/bin/python /repo/tests/forkserver.py /tmp/dsfork1/socket", "dmlsearch command"),
    ("/venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "pytest"),
    ("/bin/bash -c true", "other"),
])
def test_kinds_come_from_the_command_line(cmdline: str, kind: str) -> None:
    assert kind_of(cmdline) == kind


def test_the_command_line_writes_the_census(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "census.json"
    assert main(["--out", str(out), "--", sys.executable, "-c", "pass"]) == 0
    written = json.loads(out.read_text())
    assert written["returncode"] == 0 and written["machine"]["cores"] >= 1
    assert "CPU-seconds" in capsys.readouterr().out
    with pytest.raises(SystemExit) as error:
        main(["--out", str(out)])
    assert error.value.code == 2


def test_a_servers_process_tree_is_counted_whole() -> None:
    """benchmarks/mlflow_server_start.py counts a server's processes and their CPU seconds:
    here a parent with a busy child and a busy grandchild."""
    from benchmarks.mlflow_server_start import _tree

    grandchild = BUSY.format(seconds=0.3) + "\ntime.sleep(30)"
    child = (f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', "
             f"{grandchild!r}])\n{BUSY.format(seconds=0.3)}\ntime.sleep(30)")
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys\nsubprocess.run("
                               f"[sys.executable, '-c', {child!r}])"], start_new_session=True)
    try:
        deadline = time.time() + 30
        while (found := _tree(parent.pid))[1] < 0.6 and time.time() < deadline:
            time.sleep(0.1)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
    assert found[0] == 3 and 0.6 <= found[1] <= 1.2


def test_idle_workers_alternates_the_ways_and_pairs_the_ratios_by_repetition() -> None:
    from benchmarks.idle_workers import WAYS
    from benchmarks.idle_workers import _alternated
    from benchmarks.idle_workers import summarise

    base, mine = list(WAYS)
    assert list(_alternated(2)) == [(0, base), (0, mine), (1, mine), (1, base)]
    runs = [{"rep": rep, "way": way, "wall_s": wall, "cpu_s": cpu, "ray_worker_processes": n}
            for rep, way, wall, cpu, n in [(0, base, 40.0, 60.0, 6), (0, mine, 36.0, 57.0, 4),
                                           (1, mine, 30.0, 50.0, 4), (1, base, 40.0, 52.0, 6),
                                           (2, base, 50.0, 70.0, 6), (2, mine, 45.0, 70.0, 4)]]
    summary = summarise(runs)
    # per repetition: 36/40, 30/40, 45/50 -> 0.9, 0.75, 0.9
    assert summary["wall_s"]["ratio_median"] == 0.9
    assert summary["wall_s"]["ratio_range"] == [0.75, 0.9]
    assert summary["wall_s"][base] == 40.0 and summary["wall_s"][mine] == 36.0
    assert summary["ray_worker_processes"]["ratio_median"] == pytest.approx(0.667, abs=1e-3)
