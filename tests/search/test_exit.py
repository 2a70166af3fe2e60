"""A ``dmlsearch`` command ends without Python's last garbage collection
(``search/process_end.py``, called by the command line and the trial functions): its exit
handler runs after the others and freezes what is alive; it is registered once however often
``main`` runs in a process, and not at all with ``DMLSEARCH_EXIT_GC=collect``; the Python API
does not register it. A command whose reader left ends quietly with the shell's SIGPIPE code."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import REPO

_CHILD = """
import atexit, gc, sys
atexit.register(lambda: print("frozen at the end:", gc.get_freeze_count() > 0))  # runs last
import dmlsearch.search.cli as cli
n = atexit._ncallbacks()
cli.main(["spaces"])
print("registered:", atexit._ncallbacks() - n)
# registered after main's, as MLflow's, Ray's and logging's are in a real command: runs before
atexit.register(lambda: print("frozen before the others:", gc.get_freeze_count() > 0))
cli.main(["spaces"])
cli.main(["spaces"])
print("registered again:", atexit._ncallbacks() - n - 2)
"""


def test_a_command_freezes_what_is_alive_after_the_other_exit_handlers() -> None:
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert "registered: 1" in lines and "registered again: 0" in lines  # one per process
    # exit handlers run last-registered first: the ones registered after main's (MLflow's,
    # Ray's, logging's in a real command) see nothing frozen; the freeze comes after them
    assert lines[-2:] == ["frozen before the others: False", "frozen at the end: True"]


def test_collect_lets_python_collect_as_usual() -> None:
    env = {**os.environ, "DMLSEARCH_EXIT_GC": "collect"}
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          cwd=REPO, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert "registered: 0" in lines
    assert lines[-2:] == ["frozen before the others: False", "frozen at the end: False"]


def test_the_python_api_leaves_the_users_exit_alone() -> None:
    code = ("import atexit, gc; atexit.register(lambda: print(gc.get_freeze_count()))\n"
            "import dmlsearch\n"
            "try:\n    dmlsearch.results('/nonexistent/search')\n"
            "except dmlsearch.UserError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1:] == ["0"]


_PROGRESS = """
import sys
from dmlsearch.search.reporting.progress import SearchProgress
progress = SearchProgress(sys.stdout, trials=2, metric="map@r", mode="max", searched=["lr"],
                          concurrency=1, max_iterations=3, live=False)
progress.line("[1/2] trial t00 completed")
"""


def _with_closed_output(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``args`` run with a standard output whose reader already left: its first write fails."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(args, stdout=write, stderr=subprocess.PIPE, text=True, cwd=REPO,
                              timeout=300)
    finally:
        os.close(write)


def test_a_command_whose_reader_left_ends_quietly() -> None:
    """``dmlsearch spaces | head -1``: the reader closes the pipe; the command ends with the
    shell's code for SIGPIPE and no traceback; so does a search whose progress line meets it
    (rich's console alone would end it with 1)."""
    for args in ([sys.executable, "-m", "dmlsearch.search.cli", "spaces"],
                 [sys.executable, "-c", _PROGRESS]):
        proc = _with_closed_output(args)
        assert proc.returncode == 141, proc.stderr[-2000:]
        assert proc.stderr == ""
