"""How ``pytest -n 2`` (pytest-xdist) shares the suite between its workers.

A worker takes whole *groups*: a file (its module-scoped fixtures run once), or the files that
ask for one session-scoped search (:data:`SHARED_SEARCHES`: each search is made once in the
suite, not once per worker). The groups go out in pytest-xdist's order (the most tests
first). Handing out the longest groups first was measured and rejected: it runs two real
searches side by side for most of the run, 4 trial processes and two Ray clusters on 2 cores,
and every test took longer (docs/benchmarks.md, "Where the test suite's time goes").
"""

from __future__ import annotations

from typing import Any

SHARED_SEARCHES: dict[str, tuple[str, ...]] = {
    "shared_search": ("tests/e2e/test_search.py", "tests/e2e/test_secrets.py"),
    "curve_table": ("tests/e2e/test_replay.py", "tests/search/replay/test_table.py",
                    "tests/test_api.py", "tests/benchmarks/test_record_at_revision.py",
                    "tests/e2e/test_interrupt.py"),
    "speakers_cache": ("tests/e2e/test_audio.py", "tests/spaces/test_preview.py"),
}
"""The session-scoped fixtures that run a real search, record a table or synthesise a corpus
(minutes), and the files that ask for them: those files run in one worker (checked against the
fixtures the tests ask for by tests/test_structure.py)."""


def worker_group(nodeid: str) -> str:
    """The worker group of a test: its file, or the first file of the group in
    :data:`SHARED_SEARCHES` it is in."""
    path = nodeid.split("::")[0]
    for files in SHARED_SEARCHES.values():
        if path in files:
            return files[0]
    return path


def group_scheduling(config: Any, log: Any) -> Any:
    """pytest-xdist's scheduler, handing out whole :func:`worker_group` groups (in its own
    order: the groups with the most tests first)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return GroupScheduling(config, log)
