"""``benchmarks/curve_crossing.py``: the top share kept by hand, the two extremes of curves that
never cross and curves that swap their order, and which curves a table's file gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.curve_crossing import crossing
from benchmarks.curve_crossing import full_curves
from benchmarks.curve_crossing import top_kept


def test_top_kept_counts_the_final_top_found_early() -> None:
    final = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]
    assert top_kept(final, final, share=0.2) == 1.0
    early = [0.1, 0.8, 0.9, 0.6, 0.5, 0.4, 0.3, 0.2, 0.7, 0.0]  # 1 of the top 2 kept
    assert top_kept(early, final, share=0.2) == 0.5


def test_curves_that_never_cross_and_curves_that_swap() -> None:
    parallel = [[0.1 * k + 0.01 * e for e in range(8)] for k in range(20)]
    result = crossing(parallel)
    assert result["0.25"] == {"epoch": 2, "spearman": pytest.approx(1.0), "top_kept": 1.0}
    assert result["best_epoch"]["median"] == 8
    # slow starters end best: the early order is the final one reversed
    swap = [[(k if e < 4 else 40 - k) * 0.01 + 0.001 * e for e in range(8)] for k in range(20)]
    result = crossing(swap)
    assert result["0.25"]["spearman"] == pytest.approx(-1.0)
    assert result["0.25"]["top_kept"] == 0.0


def test_only_seed_zero_curves_trained_to_the_end_are_read(tmp_path: Path) -> None:
    def run(seed: int, epochs: int, status: str = "ok") -> str:
        return json.dumps({"kind": "run", "seed": seed, "status": status,
                           "epochs": [{"val": {"map@r": 0.1 * e}} for e in range(epochs)]})

    path = tmp_path / "table.jsonl"
    path.write_text("\n".join([json.dumps({"kind": "header"}), run(0, 4), run(1, 4),
                               run(0, 2), run(0, 4, "failed"), run(0, 4)]) + "\n")
    assert full_curves(path) == [[0.0, 0.1, 0.2, pytest.approx(0.3)]] * 2
