"""Learning-curve tables: recorded by the real command (the session fixture ``curve_table``),
read back, resumed; a foreign or missing file is a user error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dmlsearch.search.replay import load_table
from dmlsearch.search.replay import record_table
from dmlsearch.spaces import load_space
from dmlsearch.trainables.errors import UserError
from tests.helpers import CURVE_GRID
from tests.helpers import cli_command
from tests.helpers import cli_env


@pytest.mark.slow
def test_the_recorded_table_holds_every_point_and_resumes(curve_table: Path,
                                                          tmp_path: Path) -> None:
    table = load_table(curve_table)
    assert table.metric == "map@r" and table.epochs == 3
    assert len(table.configs()) == 6 and len(table.curves) == 8  # 6 points + 2 with seed 1
    for curve in table.curves.values():
        assert curve.status == "ok" and [r["epoch"] for r in curve.epochs] == [1, 2, 3]
        best = max(curve.epochs, key=lambda r: r["val"]["map@r"])
        assert curve.best_epoch == best["epoch"] and curve.test_at_best == best["test"]
        best_so_far = -1.0
        for row in curve.epochs:  # tested exactly where validation improved
            improved = row["val"]["map@r"] > best_so_far
            assert ("test" in row) == improved
            best_so_far = max(best_so_far, row["val"]["map@r"])
    header = json.loads(curve_table.read_text().splitlines()[0])
    assert header["space_name"] == "curves_grid" and header["base"]["epochs"] == 3
    # Recording again trains nothing: the table is complete.
    copy = tmp_path / "copy.jsonl"
    copy.write_text(curve_table.read_text())
    assert record_table(load_space(CURVE_GRID), copy, overrides={}, workers=1, second_seed=2,
                        command="test", echo=lambda _: None) == 0


@pytest.mark.slow
def test_ctrl_c_stops_the_recorder_and_keeps_what_it_recorded(curve_table: Path,
                                                              tmp_path: Path) -> None:
    """A terminal's Ctrl-C (the whole process group) after the first training: the
    trainings not started are dropped (a process pool would run them all before it shut
    down), those in flight end and are kept, the command exits 130 and the table reads back
    whole (resuming a table: the test above)."""
    table = tmp_path / "t.jsonl"
    proc = subprocess.Popen(
        cli_command("record-curves", "--space", str(CURVE_GRID), "--out", str(table),
                    "--workers", "2", "--second-seed", "2", "--set", "epochs=1"),
        env=cli_env(curve_table.parent / "cache"), cwd=tmp_path, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline and (
            not table.is_file() or len(table.read_text().splitlines()) < 2):
        time.sleep(0.1)  # the header, and the first training
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=900)  # the trainings in flight finish
    assert proc.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert "record-curves: interrupted:" in stdout and "dmlsearch: interrupted" in stderr
    rows = [json.loads(line) for line in table.read_text().splitlines()[1:]]
    assert 1 <= len(rows) < 8 and all(r["status"] == "ok" for r in rows)
    assert len(load_table(table).curves) == len(rows)


def test_a_foreign_or_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist; record one"):
        load_table(tmp_path / "nope.jsonl")
    (tmp_path / "x.jsonl").write_text('{"kind": "run"}\n')
    with pytest.raises(UserError, match="is not a learning-curve table"):
        load_table(tmp_path / "x.jsonl")
