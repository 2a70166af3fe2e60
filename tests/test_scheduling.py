"""``pytest -n 2`` hands out whole groups of files, the longest first (tests/scheduling.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.scheduling import DURATIONS
from tests.scheduling import UNKNOWN_TEST_S
from tests.scheduling import group_seconds
from tests.scheduling import longest_first
from tests.scheduling import read_durations
from tests.scheduling import worker_group

ROOT = Path(__file__).resolve().parents[1]


def test_groups_go_longest_first_and_an_unknown_one_by_its_tests() -> None:
    queue = {"a.py": {"a.py::t": False},
             "b.py": {f"b.py::t{i}": False for i in range(30)},  # unknown: 30 x 0.5 s
             "c.py": {"c.py::t": False}}
    assert list(longest_first(queue, {"a.py": 3.0, "c.py": 90.0})) == ["c.py", "b.py", "a.py"]
    assert list(longest_first(queue, {})) == ["b.py", "a.py", "c.py"]  # ties keep their order
    assert UNKNOWN_TEST_S * 30 > 3.0


def test_a_missing_or_broken_durations_file_orders_nothing(tmp_path: Path) -> None:
    assert read_durations(tmp_path / "none.json") == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert read_durations(tmp_path / "bad.json") == {}
    (tmp_path / "list.json").write_text('{"groups": [1, 2]}')
    assert read_durations(tmp_path / "list.json") == {}


def test_the_recorded_durations_name_groups_of_this_suite() -> None:
    recorded = read_durations()
    assert recorded, f"{DURATIONS} is missing or unreadable"
    missing = [g for g in recorded if not (ROOT / g).exists()]
    assert not missing, (f"{DURATIONS} names files that are gone: {missing}; record it again "
                         "(python -m tests.scheduling JUNIT.xml)")
    assert all(worker_group(g) == g for g in recorded)


def test_a_junit_report_sums_into_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(textwrap.dedent("""\
        <?xml version="1.0" encoding="utf-8"?>
        <testsuites><testsuite name="pytest">
        <testcase classname="tests.e2e.test_search" name="test_a" time="10.5" />
        <testcase classname="tests.e2e.test_secrets" name="test_b" time="2.0" />
        <testcase classname="tests.test_scheduling.TestX" name="test_c" time="0.25" />
        <testcase classname="tests.gone.test_d" name="test_d" time="5" />
        </testsuite></testsuites>
        """))
    monkeypatch.chdir(ROOT)
    assert group_seconds(report) == {"tests/e2e/test_search.py": 12.5,
                                     "tests/test_scheduling.py": 0.25}


def test_durations_lines_sum_into_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    output = tmp_path / "pytest.log"
    output.write_text(textwrap.dedent("""\
        ============ slowest durations ============
        66.60s setup    tests/e2e/test_search.py::test_trials_ran_through_ray_tune_and_optuna
        9.17s call     tests/e2e/test_search.py::test_importance_of_the_finished_study
        1.00s teardown tests/e2e/test_secrets.py::test_x[a b]
        0.50s call     tests/gone/test_y.py::test_y
        ===== 3 passed in 77.00s =====
        """))
    monkeypatch.chdir(ROOT)
    assert group_seconds(output) == {"tests/e2e/test_search.py": pytest.approx(76.77)}


def test_two_workers_start_with_the_two_longest_groups(tmp_path: Path) -> None:
    """A real ``pytest -n 2`` over four files of one test each: each worker's first test is
    one of the two groups the durations file says are longest (pytest-xdist alone would hand
    them out in file order)."""
    started = tmp_path / "started"
    started.mkdir()
    for name in "abcd":
        (tmp_path / f"test_{name}.py").write_text(textwrap.dedent(f"""\
            import os, time
            def test_{name}():
                worker = os.environ["PYTEST_XDIST_WORKER"]
                with open({str(started / 'log')!r}, "a") as log:
                    log.write(worker + " {name}\\n")
                time.sleep(0.5)
            """))
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"groups": {"test_c.py": 50, "test_d.py": 80,
                                                "test_a.py": 1, "test_b.py": 2}}))
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""\
        from pathlib import Path
        from tests.scheduling import group_scheduling
        def pytest_xdist_make_scheduler(config, log):
            return group_scheduling(config, log, Path({str(durations)!r}))
        """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-p",
                           "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    first: dict[str, str] = {}
    for line in (started / "log").read_text().splitlines():
        worker, name = line.split()
        first.setdefault(worker, name)
    assert sorted(first.values()) == ["c", "d"], (started / "log").read_text()
