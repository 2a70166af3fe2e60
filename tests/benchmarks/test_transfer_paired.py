"""Two transfer rules compared seed by seed (``benchmarks/transfer_paired.py``): logs whose
searches without transfer differ are refused in one line, exit 2, nothing written; the committed
comparison agrees with the committed transfer run it reads as "after"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.search_transfer import TRANSFER_METHOD
from benchmarks.transfer_paired import Mismatch
from benchmarks.transfer_paired import check_same_baselines
from benchmarks.transfer_paired import main
from benchmarks.transfer_paired import markdown
from tests.helpers import REPO

RESULTS = REPO / "benchmarks" / "results"
COMMITTED = RESULTS / "transfer_paired_to_end_virtual_cpu_2026-11-29.json"
AFTER = RESULTS / "search_transfer_to_end_virtual_cpu_2026-11-29.json"


def _run(table: str, method: str, seed: int, events: list, source: str = "") -> dict[str, Any]:
    return {"table": table, "method": method, "seed": seed, "source": source, "events": events}


def _log(path: Path, *runs: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    return path


def test_the_same_searches_without_transfer_are_required() -> None:
    base = {("g", "random+asha", 0, ""): _run("g", "random+asha", 0, [[0.5, 0]])}
    moved = {("g", "random+asha", 0, ""): _run("g", "random+asha", 0, [[0.6, 0]])}
    assert check_same_baselines(base, dict(base)) == 1
    with pytest.raises(Mismatch, match="the random\\+asha search of g, seed 0, differs"):
        check_same_baselines(base, moved)
    with pytest.raises(Mismatch, match="share no search without transfer"):
        check_same_baselines(base, {})
    # the searches with transfer may differ: they are what is compared
    with_transfer = {**base, ("g", TRANSFER_METHOD, 0, "h"): _run("g", TRANSFER_METHOD, 0, [])}
    assert check_same_baselines(with_transfer, base) == 1


def test_logs_that_cannot_be_compared_are_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _log(tmp_path / "a.jsonl", _run("glyphs", "random+asha", 0, [[0.5, 0]]))
    after = _log(tmp_path / "b.jsonl", _run("glyphs", "random+asha", 0, [[0.7, 0]]))
    out = tmp_path / "out.json"
    assert main(["--before", str(before), "--after", str(after), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("transfer_paired: the random+asha search of glyphs")
    assert not out.exists()


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    return json.loads(COMMITTED.read_text())


def test_the_committed_comparison_agrees_with_the_run_it_reads(committed: dict[str, Any]
                                                               ) -> None:
    after = json.loads(AFTER.read_text())["transfer"]
    assert committed["same_searches_without_transfer"] > 0
    assert len(committed["pairs"]) == len(after) == 13
    for pair in committed["pairs"]:
        run = after[f"{pair['source']}->{pair['target']}"]["methods"][TRANSFER_METHOD]
        assert pair["after"]["regret_at"]["0.25"] == pytest.approx(
            run["regret_at"]["0.25"]["mean"])
        assert pair["after"]["regret_at"]["1.0"] == pytest.approx(run["regret_at"]["1.0"]["mean"])
        assert pair["after"]["within_sigma_5"] == pytest.approx(run["within_sigma_5"])
        assert pair["paired_seeds"] == pair["before"]["seeds"] == pair["after"]["seeds"] == 30
        for gain in pair["paired_gain"].values():
            assert gain["low"] <= gain["mean"] <= gain["high"]
    # the rule was chosen on the nine pairs recorded first, the four with glyphs-a held back
    held = [p["target"] for p in committed["pairs"] if not p["chosen_on"]]
    assert len(held) == 4 and sum("glyphs-a" in (p["source"], p["target"])
                                  for p in committed["pairs"] if not p["chosen_on"]) == 4


def test_the_table_has_a_row_per_pair(committed: dict[str, Any]) -> None:
    rows = markdown(committed).splitlines()
    assert len(rows) == 2 + len(committed["pairs"])
    assert rows[2].startswith("| glyphs->omniglot-ms | yes | 0.050 → 0.038 (0.61× → 0.47×)")
