"""How ``pytest -n 2`` (pytest-xdist) shares the suite between its workers.

A worker takes whole *groups*: a file (its module-scoped fixtures run once), or the files that
ask for one session-scoped search (:data:`SHARED_SEARCHES`: each search is made once in the
suite, not once per worker). The groups go out longest first, by the seconds each took in the
last recorded run (``tests/durations.json``): a few groups (a real search, a killed and
resumed one, a two-node cluster) are most of the suite's time, and a worker that starts one
of them last keeps the other waiting for minutes. pytest-xdist's own order (most tests first)
starts them last.

``python -m tests.scheduling REPORT`` writes ``tests/durations.json`` from a whole run's JUnit
report (``python -m pytest --junitxml=REPORT.xml``) or its output with ``--durations=0``: each
group's seconds, setup, call and teardown together. A group it does not name (a new file) counts :data:`UNKNOWN_TEST_S` per test.
"""

from __future__ import annotations

import argparse
import json
import re
import xml.etree.ElementTree as ET
from collections import OrderedDict
from pathlib import Path
from typing import Any

SHARED_SEARCHES: dict[str, tuple[str, ...]] = {
    "shared_search": ("tests/e2e/test_search.py", "tests/e2e/test_secrets.py"),
    "curve_table": ("tests/e2e/test_replay.py", "tests/search/replay/test_table.py",
                    "tests/test_api.py"),
    "speakers_cache": ("tests/e2e/test_audio.py", "tests/spaces/test_preview.py"),
}
"""The session-scoped fixtures that run a real search, record a table or synthesise a corpus
(minutes), and the files that ask for them: those files run in one worker (checked against the
fixtures the tests ask for by tests/test_structure.py)."""

DURATIONS = Path(__file__).with_name("durations.json")
UNKNOWN_TEST_S = 0.5
"""The seconds a test of a group missing from :data:`DURATIONS` counts for (the median test
takes less; a new file of end-to-end tests is then still not put last for long)."""


def worker_group(nodeid: str) -> str:
    """The worker group of a test: its file, or the first file of the group in
    :data:`SHARED_SEARCHES` it is in."""
    path = nodeid.split("::")[0]
    for files in SHARED_SEARCHES.values():
        if path in files:
            return files[0]
    return path


def read_durations(path: Path = DURATIONS) -> dict[str, float]:
    """Each group's seconds in the recorded run; none when the file is missing or unreadable
    (the order is then pytest-xdist's, nothing fails)."""
    try:
        groups = json.loads(path.read_text())["groups"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {str(g): float(s) for g, s in groups.items()} if isinstance(groups, dict) else {}


def longest_first(queue: dict[str, dict[str, bool]],
                  durations: dict[str, float]) -> OrderedDict[str, dict[str, bool]]:
    """The groups of ``queue`` (group -> its tests) ordered by their expected seconds, longest
    first; ties keep their order."""
    def expected(item: tuple[str, dict[str, bool]]) -> float:
        group, tests = item
        return durations.get(group, UNKNOWN_TEST_S * len(tests))

    return OrderedDict(sorted(queue.items(), key=expected, reverse=True))


def group_scheduling(config: Any, log: Any, durations: Path = DURATIONS) -> Any:
    """pytest-xdist's scheduler, handing out :func:`worker_group` groups longest first by
    the seconds recorded in ``durations``."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the first call: the queue holds every group
                self.workqueue = longest_first(self.workqueue, read_durations(durations))
                self.ordered = True
            super()._assign_work_unit(node)

    return GroupScheduling(config, log)


_DURATION_LINE = re.compile(r"^\s*([0-9.]+)s (?:setup|call|teardown)\s+(\S+\.py)::")


def group_seconds(report: Path) -> dict[str, float]:
    """Each group's seconds in a JUnit report (pytest's default: setup, call and teardown) or
    in pytest's ``--durations=0`` lines; files that are gone are left out."""
    spent: list[tuple[str, float]] = []
    if report.suffix == ".xml":
        for case in ET.parse(report).getroot().iter("testcase"):
            # pytest names a test of tests/e2e/test_x.py "tests.e2e.test_x" (a class adds ".Cls")
            parts = case.get("classname", "").split(".")
            paths = ["/".join(parts[:end]) + ".py" for end in range(len(parts), 0, -1)]
            found = next((p for p in paths if Path(p).exists()), None)
            if found:
                spent.append((found, float(case.get("time", 0.0))))
    else:
        for line in report.read_text(errors="replace").splitlines():
            match = _DURATION_LINE.match(line)
            if match and Path(match[2]).exists():
                spent.append((match[2], float(match[1])))
    seconds: dict[str, float] = {}
    for path, s in spent:
        group = worker_group(path)
        seconds[group] = seconds.get(group, 0.0) + s
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description="Write tests/durations.json from a whole "
                                     "run's JUnit report (pytest --junitxml=F.xml) or its "
                                     "output with --durations=0.")
    parser.add_argument("report", type=Path)
    parser.add_argument("--machine", default="", help="where the run ran, in words")
    parser.add_argument("--out", type=Path, default=DURATIONS)
    args = parser.parse_args()
    try:
        seconds = group_seconds(args.report)
    except (OSError, ET.ParseError) as exc:
        parser.exit(2, f"error: cannot read {args.report} ({exc}); expected the JUnit report "
                       "or the --durations=0 output of a pytest run\n")
    if not seconds:
        parser.exit(2, f"error: {args.report} names no test of this folder; expected the JUnit "
                       "report (pytest --junitxml=F.xml) or the output (pytest "
                       "--durations=0) of a run from the repository root\n")
    ranked = dict(sorted(((g, round(s, 1)) for g, s in seconds.items()),
                         key=lambda gs: -gs[1]))
    body = {"about": "seconds per worker group of one run of the suite (tests/scheduling.py)",
            "machine": args.machine, "groups": ranked}
    args.out.write_text(json.dumps(body, indent=1) + "\n")
    print(f"{len(ranked)} groups, {sum(ranked.values()):.0f} s, written to {args.out}")


if __name__ == "__main__":
    main()
