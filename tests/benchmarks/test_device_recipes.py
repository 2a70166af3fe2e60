"""The pure helpers of issue #32's GPU checks (``benchmarks/device/recipes.sh``): the
configurations of ``speaker_verification.py --budget``, how its runs are summarised, and the
summary of the device call's files (the benchmarks themselves are never run by the tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.device.recipes_summary import summarise
from benchmarks.speaker_verification import _summary
from benchmarks.speaker_verification import budget_config
from dmlsearch.trainables.config import TrialConfig


def test_budget_runs_train_the_sources_choice_on_the_speakers_with_its_warmup_share() -> None:
    preview = budget_config("preview", seed=2, steps=3000, evals=20, device="cuda")
    full = budget_config("full", seed=0, steps=3000, evals=20, device="cuda")
    for cfg in (preview, full):
        TrialConfig.from_flat(cfg)  # a valid trial configuration
        assert cfg["dataset"] == "speakers" and cfg["loss"] == "e2e"
        # the space's warm start: the source's chosen configuration (A.3.4)
        assert (cfg["lr"], cfg["loss.d_layers"], cfg["loss.d_size"]) == (0.023717, 4, 256)
        assert cfg["patience"] == 0 and cfg["device"] == "cuda"
        # 4,000 warm-up steps of 600k: 20 of 3,000
        assert cfg["warmup_steps"] == 20
    assert preview["seed"] == 2
    # 720 training utterances: 12 batches of 12 x 5 an epoch, 6 of 24 x 5
    assert (preview["backbone"], preview["batch_size"], preview["epochs"]) == ("tdnn_small", 60,
                                                                               250)
    assert (full["backbone"], full["batch_size"], full["epochs"]) == ("tdnn", 120, 500)
    assert (preview["eval_every"], full["eval_every"]) == (12, 25)  # 20 evaluations each
    tiny = budget_config("preview", seed=0, steps=12, evals=20, device="cpu", eval_every=1)
    assert (tiny["epochs"], tiny["eval_every"], tiny["warmup_steps"]) == (1, 1, 5)


def _row(arm: str, seed: int, steps: int, cos: float, d: float) -> dict:
    return {"arm": arm, "seed": seed, "epoch": steps // 12, "steps": steps, "eer_cosine": cos,
            "eer_e2e": d, "eer_fusion": (cos + d) / 2, "auc_cosine": 1 - cos}


def test_the_budget_summary_takes_each_runs_last_evaluation() -> None:
    rows = [{"arm": "preview", "seed": 0, "config": {}},
            _row("preview", 0, 120, 0.3, 0.5), _row("preview", 0, 240, 0.2, 0.3),
            _row("preview", 1, 120, 0.25, 0.4),  # stopped early: its last is its only one
            _row("preview", 2, 240, 0.1, 0.2),
            {"arm": "preview", "seed": 2, "end": "deadline", "steps": 250}]
    summary = _summary(rows)
    assert set(summary) == {"preview"}  # no full run: no entry
    arm = summary["preview"]
    assert arm["seeds"] == [0, 1, 2] and arm["steps"] == [240, 120, 240]
    assert arm["per_seed"]["eer_e2e"] == [0.3, 0.4, 0.2]
    assert arm["median"]["eer_cosine"] == 0.2
    assert arm["range"]["eer: e2e - cosine"] == pytest.approx([0.1, 0.15])
    assert "mindcf01_e2e" not in arm["median"]  # not reported: not invented


def test_the_device_summary_reads_what_came_back_and_names_what_did_not(tmp_path: Path) -> None:
    def pack(trials: int, rate: float) -> dict:
        return {"pack": [{"trials": trials, "total_images_per_s": rate}]}

    (tmp_path / "b_pack_1.json").write_text(json.dumps(pack(1, 2000.0)))
    (tmp_path / "b_pack_4.json").write_text(json.dumps(pack(4, 3000.0)))
    (tmp_path / "b_pack_4_mps.json").write_text(json.dumps({"pack": {"error": "boom"}}))
    phase = {"phase": "warm-up epoch (epoch 1)", "recipe_median": 3000.0,
             "before_median": 2000.0, "ratio_recipe_to_before_median": 1.5,
             "ratio_range": [1.4, 1.6], "recipe_trunk": {"trunk_trainable_tensors": 0,
                                                         "batchnorms_in_train_mode": 0}}
    (tmp_path / "a_recipe.json").write_text(json.dumps({"recipe": [
        {"model": "ResNet50-512", "batch_size": 100, "precision": "bf16", "phases": [phase]}]}))
    parts, machine = tmp_path / "parts.txt", tmp_path / "machine.txt"
    parts.write_text("a_recipe 0 61\nc_e2e 124 130\ntotal - 400\n")
    machine.write_text("gpu: NVIDIA H200, 143771 MiB\nmps: unavailable (no binary)\n")
    summary = summarise(tmp_path, parts, machine)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert summary["parts"]["c_e2e"] == {"rc": "124", "seconds": "130"}
    assert summary["machine"]["gpu"] == "NVIDIA H200, 143771 MiB"
    packing = summary["b_packing"]
    assert (packing["four_over_one"], packing["four_mps_over_one"]) == (1.5, None)
    assert packing["errors"] == {"b_pack_1": None, "b_pack_4": None, "b_pack_4_mps": "boom"}
    assert packing["mps"] == "unavailable (no binary)"
    [row] = summary["a_recipe_cost"]
    assert (row["ratio"], row["recipe_trunk_trainable"]) == (1.5, 0)
    assert "c_e2e.json" in summary["c_learned_distance"]["missing"]
