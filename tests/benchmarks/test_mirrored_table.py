"""The deliberately misleading transfer source (``benchmarks/mirrored_table.py``, issue 36): a
recorded table's curves at mirrored configurations. Reflections against hand-computed values;
the mirrored table holds the original's curve at the mirror of each configuration; it is
written once and again when the original changes; and on the recorded data the original's
best configuration, read in the mirror, lands among the original's poor ones."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from benchmarks.efficiency_tables import TABLES
from benchmarks.mirrored_table import mirror_config
from benchmarks.mirrored_table import mirrored
from dmlsearch.search.replay import load_table
from dmlsearch.search.replay.table import config_key
from dmlsearch.spaces import Param
from dmlsearch.spaces import load_space

SOURCE = TABLES["omniglot-ms"]
SPACE = load_space(str(SOURCE.space))


def test_reflections_against_hand_computed_values() -> None:
    lr = Param(key="lr", kind="float", low=1e-4, high=1e-2, log=True)
    margin = Param(key="loss.margin", kind="float", low=0.0, high=1.0)
    size = Param(key="embedding_size", kind="int", low=32, high=512)
    loss = Param(key="loss", kind="categorical", choices=("a", "b", "c"))
    params = [lr, margin, size, loss]
    config = {"lr": 2e-4, "loss.margin": 0.8, "embedding_size": 100, "loss": "a", "seed": 3}
    out = mirror_config(config, params)
    assert out == pytest.approx({"lr": 5e-3, "loss.margin": 0.2, "embedding_size": 444,
                                 "loss": "c", "seed": 3})  # log: 1e-6 / 2e-4; 32 + 512 - 100
    assert mirror_config({"lr": 1e-3, "loss": "b"}, params) == pytest.approx(
        {"lr": 1e-3, "loss": "b"})  # the middles stay
    assert mirror_config(out, params) == pytest.approx(config)  # twice is the identity
    with pytest.raises(ValueError, match="without branches"):
        mirror_config(config, [margin, Param(key="loss.margin", kind="float", low=0, high=2)])


def test_the_mirror_holds_the_originals_curves_at_mirrored_configurations(
        tmp_path: Path) -> None:
    original = load_table(SOURCE.table)
    path = mirrored(SOURCE.table, tmp_path / "m.jsonl", SPACE.params, space_name=SPACE.name)
    mirror = load_table(path)
    assert len(mirror.curves) == len(original.curves)
    assert mirror.header["derived"]["kind"] == "mirror"
    assert mirror.header["base"] == original.header["base"]
    for (key, seed), curve in original.curves.items():
        config = mirror_config(curve.config, SPACE.params)
        assert mirror.curves[(config_key(config), seed)].epochs == curve.epochs
    assert json.loads(path.read_text().splitlines()[1])["key"] == config_key(
        json.loads(path.read_text().splitlines()[1])["config"])


def test_it_is_written_once_and_again_when_the_original_changes(tmp_path: Path) -> None:
    lines = SOURCE.table.read_text().splitlines()
    source = tmp_path / "t.jsonl"
    source.write_text("\n".join(lines[:6]) + "\n")
    out = tmp_path / "derived" / "m.jsonl"
    mirrored(source, out, SPACE.params, space_name=SPACE.name)
    stamp = out.stat().st_mtime_ns
    out.write_text(out.read_text())  # touched, same content: kept
    kept = out.stat().st_mtime_ns
    assert mirrored(source, out, SPACE.params, space_name=SPACE.name) == out
    assert out.stat().st_mtime_ns == kept and kept >= stamp
    source.write_text("\n".join(lines[:8]) + "\n")  # the original grew: written again
    mirrored(source, out, SPACE.params, space_name=SPACE.name)
    assert len(load_table(out).curves) == 7
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_the_originals_best_region_is_poor_in_the_mirror() -> None:
    """Misleading on the recorded curves themselves: the original's 5 best configurations,
    mirrored (the mirror's best region) and looked up in the original at its nearest recorded
    point, score below the original's median (the benchmark measures the same through the
    surrogate: ``search_transfer.misleading``)."""
    curves = {key: c for (key, seed), c in load_table(SOURCE.table).curves.items() if seed == 0}
    best = {key: max(r["val"]["map@r"] for r in c.epochs) for key, c in curves.items()}
    top = sorted(best, key=best.__getitem__, reverse=True)[:5]

    def scaled(config: dict[str, float]) -> list[float]:  # each setting's range as [0, 1]
        return [(math.log(config[p.key] / p.low) / math.log(p.high / p.low)) if p.log
                else (config[p.key] - p.low) / (p.high - p.low) for p in SPACE.params]

    points = {key: scaled(c.config) for key, c in curves.items()}

    def nearest(config: dict[str, float]) -> str:
        x = scaled(config)
        return min(points, key=lambda key: math.dist(x, points[key]))

    scores = [best[nearest(mirror_config(curves[key].config, SPACE.params))] for key in top]
    assert statistics.fmean(scores) < statistics.median(best.values())
