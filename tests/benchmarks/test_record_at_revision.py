"""``benchmarks/record_at_revision.py``: seeds trained by a revision's own code, in a worktree,
are the seeds ``record-curves --repeat-seeds`` trains with that code, line for line."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.record_at_revision import main
from dmlsearch.search.replay import record_table
from dmlsearch.spaces import load_space
from tests.helpers import CURVE_GRID
from tests.helpers import REPO


def _seed_2(path: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    return {r["key"]: r for r in rows if r["seed"] == 2}


@pytest.mark.slow
def test_a_revisions_seeds_are_the_recorders_own(curve_table: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout of the project (a worktree of HEAD is trained)")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    def worktrees() -> str:
        return subprocess.run(["git", "-C", str(REPO), "worktree", "list"],
                              capture_output=True, text=True, check=True).stdout

    before = worktrees()
    ours, theirs = tmp_path / "ours.jsonl", tmp_path / "theirs.jsonl"
    shutil.copy(curve_table, ours)
    shutil.copy(curve_table, theirs)
    assert record_table(load_space(CURVE_GRID), ours, overrides={}, workers=2, second_seed=0,
                        repeat_seeds=3, command="test", echo=lambda _: None) == 2
    assert main([str(theirs), "--repeat-seeds", "3", "--revision", head, "--workers", "2"]) == 0
    assert "2 trainings by revision" in capsys.readouterr().out
    expected, got = _seed_2(ours), _seed_2(theirs)
    assert set(got) == set(expected) and len(got) == 2
    for key, row in got.items():
        assert [e["val"] for e in row["epochs"]] == [e["val"] for e in expected[key]["epochs"]]
        assert row["recorded_on"]["code_revision"].startswith(f"{head} (a worktree")
        # the same training code: the digest of the worktree's files is the installed one's,
        # unless this checkout has uncommitted changes there
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "trainables",
                                "search/replay/curve.py"], capture_output=True, text=True,
                               check=True).stdout.strip()
        if not dirty:
            assert row["recorded_on"]["training_code"] == (
                expected[key]["recorded_on"]["training_code"])
    # run again: nothing left to train, and the worktree is gone
    assert main([str(theirs), "--repeat-seeds", "3", "--revision", head]) == 0
    assert "0 trainings" in capsys.readouterr().out
    assert worktrees() == before
