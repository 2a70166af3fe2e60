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

from dmlsearch.search.provenance import code_revision
from dmlsearch.search.provenance import training_code
from dmlsearch.search.replay import load_table
from dmlsearch.search.replay import record_table
from dmlsearch.search.replay.recording import repeat_jobs
from dmlsearch.search.replay.table import recording_session
from dmlsearch.spaces import load_space
from dmlsearch.trainables.errors import UserError
from tests.helpers import CURVE_GRID
from tests.helpers import cli_command
from tests.helpers import cli_env
from tests.helpers import ctrl_c_reaches_children


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
    # --repeat-seeds 3: the two repeated points get seed 2, nothing else; then nothing more
    repeated = {k for k, s in table.curves if s == 1}
    said: list[str] = []
    assert record_table(load_space(CURVE_GRID), copy, overrides={}, workers=2, second_seed=0,
                        repeat_seeds=3, command="test", echo=said.append) == 2
    # the run ends by saying what it added and what the table holds now
    assert said[-1].startswith("record-curves: done in ")
    assert said[-1].endswith(f": {copy} holds {len(table.curves) + 2} trainings now (2 new)")
    grown = load_table(copy)
    assert set(grown.curves) == set(table.curves) | {(k, 2) for k in repeated}
    assert all(grown.curves[k, 2].status == "ok" for k in repeated)
    rows = [json.loads(line) for line in copy.read_text().splitlines()]
    assert rows[0]["training_code"] == training_code()
    for row in rows[-2:]:  # each new line says which code trained it
        assert row["seed"] == 2 and row["recorded_on"]["training_code"] == training_code()
        assert row["recorded_on"]["code_revision"] == code_revision()
    assert record_table(load_space(CURVE_GRID), copy, overrides={}, workers=1, second_seed=0,
                        repeat_seeds=3, command="test", echo=lambda _: None) == 0


@pytest.mark.slow
def test_ctrl_c_stops_the_recorder_and_keeps_what_it_recorded(curve_table: Path,
                                                              tmp_path: Path) -> None:
    """A terminal's Ctrl-C (the whole process group) after the first training: the
    trainings not started are dropped (a process pool would run them all before it shut
    down), those in flight end and are kept, the command exits 130 and the table reads back
    whole (resuming a table: the test above)."""
    table = tmp_path / "t.jsonl"
    with ctrl_c_reaches_children():
        proc = subprocess.Popen(
            cli_command("record-curves", "--space", str(CURVE_GRID), "--out", str(table),
                        "--workers", "2", "--second-seed", "2", "--set", "epochs=1"),
            env=cli_env(curve_table.parent / "cache"), cwd=tmp_path, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline and (
            not table.is_file() or len(table.read_text().splitlines()) < 2):
        time.sleep(0.1)  # the header, and the first training
    ignored = _ignored_signals(proc.pid)  # a failure below says whether it ignored SIGINT
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=900)  # the trainings in flight finish
    assert proc.returncode == 130, f"{ignored}\n" + stdout[-2000:] + stderr[-2000:]
    assert "record-curves: interrupted:" in stdout and "dmlsearch: interrupted" in stderr
    rows = [json.loads(line) for line in table.read_text().splitlines()[1:]]
    assert 1 <= len(rows) < 8 and all(r["status"] == "ok" for r in rows)
    assert len(load_table(table).curves) == len(rows)


def _ignored_signals(pid: int) -> str:
    """The process's SigIgn line (Linux): bit 2 set, SIGINT ignored."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "SigIgn: unknown"
    return next((line for line in status.splitlines() if line.startswith("SigIgn")), "-")


def test_a_foreign_or_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist; record one"):
        load_table(tmp_path / "nope.jsonl")
    (tmp_path / "x.jsonl").write_text('{"kind": "run"}\n')
    with pytest.raises(UserError, match="is not a learning-curve table"):
        load_table(tmp_path / "x.jsonl")


def test_repeat_seeds_tops_up_the_tables_own_repeats_seed_by_seed(tmp_path: Path) -> None:
    def run(config: dict, seed: int) -> dict:
        return {"key": json.dumps(config, sort_keys=True), "config": config, "seed": seed}

    a, b, c = {"lr": 0.1}, {"lr": 0.2}, {"lr": 0.3}
    runs = [run(a, 0), run(b, 0), run(c, 0), run(b, 1), run(c, 1), run(c, 2)]
    # a has one seed: not a repeat; the new seeds go seed by seed, in the table's order
    assert repeat_jobs(tmp_path / "t.jsonl", runs, 4) == [(b, 2), (b, 3), (c, 3)]
    assert repeat_jobs(tmp_path / "t.jsonl", runs, 2) == []
    with pytest.raises(UserError, match=r"has none \(1 configurations, one seed each\); "
                                        r"record some with --second-seed N first"):
        repeat_jobs(tmp_path / "t.jsonl", [run(a, 0)], 3)


def test_repeat_seeds_needs_a_table_of_the_same_space(curve_table: Path, tmp_path: Path) -> None:
    space = load_space(CURVE_GRID)
    with pytest.raises(UserError, match="adds seeds to an existing table, but .* holds none"):
        record_table(space, tmp_path / "new.jsonl", overrides={}, workers=1, second_seed=0,
                     repeat_seeds=3, command="test", echo=lambda _: None)
    assert not (tmp_path / "new.jsonl").exists()  # nothing half-written
    other = tmp_path / "other.jsonl"
    lines = curve_table.read_text().splitlines()
    other.write_text("\n".join([json.dumps({**json.loads(lines[0]), "space_name": "elsewhere"}),
                                *lines[1:]]) + "\n")
    with pytest.raises(UserError, match="is a table of space 'elsewhere', got --space "
                                        "'curves_grid'; give the table's own space"):
        record_table(space, other, overrides={}, workers=1, second_seed=0, repeat_seeds=3,
                     command="test", echo=lambda _: None)


def _with_header(source: Path, path: Path, **changes: object) -> Path:
    lines = source.read_text().splitlines()
    header = {k: v for k, v in {**json.loads(lines[0]), **changes}.items() if v is not None}
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    return path


def test_a_table_of_other_training_code_is_refused_unless_allowed(curve_table: Path,
                                                                  tmp_path: Path) -> None:
    """Adding to a table trained by other code would mix two trainings under one
    configuration (as the recipes' proxy learning rate did to a table recorded before it)."""
    space = load_space(CURVE_GRID)
    other = _with_header(curve_table, tmp_path / "other.jsonl", training_code="0123456789abcdef",
                         code_revision="a4c54bd+dirty")
    before = other.read_text()
    with pytest.raises(UserError, match=r"was recorded by other training code \(revision "
                       r"a4c54bd\+dirty, training code 0123456789abcdef; .*continue it from that "
                       r"revision \(git worktree add DIR a4c54bd\), give another --out, or add "
                       r"--allow-code-change") as caught:
        record_table(space, other, overrides={}, workers=1, second_seed=2, command="test",
                     echo=lambda _: None)
    assert "\n" not in str(caught.value) and other.read_text() == before  # nothing written
    said: list[str] = []
    assert record_table(space, other, overrides={}, workers=1, second_seed=2, command="test",
                        allow_code_change=True, echo=said.append) == 0  # complete: nothing new
    assert not any("warning" in line for line in said)
    # a table from before tables recorded their training code: a warning, then it goes on
    old = _with_header(curve_table, tmp_path / "old.jsonl", training_code=None,
                       code_revision="a4c54bd+dirty")
    said.clear()
    assert record_table(space, old, overrides={}, workers=1, second_seed=2, command="test",
                        echo=said.append) == 0
    assert said[0].startswith(f"record-curves: warning: {old} was recorded at revision "
                              f"a4c54bd+dirty, before tables recorded their training code, and "
                              f"this is {code_revision()}")
    # the same code: no word about it
    said.clear()
    same = _with_header(curve_table, tmp_path / "same.jsonl", training_code=training_code())
    assert record_table(space, same, overrides={}, workers=1, second_seed=2, command="test",
                        echo=said.append) == 0
    assert not any("warning" in line for line in said)


def test_a_lines_recording_session() -> None:
    """Seeds of one session are fitted together (``noise.fit_noise``): the header's (a line
    that says nothing), or the line's own place and code."""
    assert recording_session({"seed": 0}) == ""
    gpu = {"recorded_on": {"device": "cuda:0", "cpu": "Xeon"}}
    cpu = {"recorded_on": {"device": "cpu", "cpu": "Xeon"}}
    assert recording_session(gpu) != recording_session(cpu) != ""
    # with the training code's digest, a commit elsewhere does not start another session
    one = {"recorded_on": {"device": "cpu", "cpu": "EPYC", "training_code": "ab" * 8,
                           "code_revision": "1111111"}}
    two = {"recorded_on": {**one["recorded_on"], "code_revision": "2222222+dirty"}}
    other = {"recorded_on": {**one["recorded_on"], "training_code": "cd" * 8}}
    assert recording_session(one) == recording_session(two) != recording_session(other)
