"""``pytest -n 2`` hands out whole groups of files (tests/scheduling.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_two_workers_keep_each_files_tests_together(tmp_path: Path) -> None:
    """A real ``pytest -n 2`` over two files of four tests each: every test of a file runs in
    one worker (pytest-xdist's default, ``--dist load``, spreads them over both)."""
    log = tmp_path / "ran.log"
    for name in "ab":
        (tmp_path / f"test_{name}.py").write_text(textwrap.dedent(f"""\
            import os, pytest, time
            @pytest.mark.parametrize("i", range(4))
            def test_{name}(i):
                with open({str(log)!r}, "a") as out:
                    out.write(os.environ["PYTEST_XDIST_WORKER"] + " {name}\\n")
                time.sleep(0.2)
            """))
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""\
        from tests.scheduling import group_scheduling
        def pytest_xdist_make_scheduler(config, log):
            return group_scheduling(config, log)
        """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-p",
                           "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = log.read_text().splitlines()
    workers: dict[str, set[str]] = {}
    for line in lines:
        worker, name = line.split()
        workers.setdefault(name, set()).add(worker)
    assert len(lines) == 8 and all(len(w) == 1 for w in workers.values()), lines
