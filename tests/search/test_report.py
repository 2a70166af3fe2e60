"""``dmlsearch report``: the tournament ranking (hand-computed) and reports on hand-made folders
that mirror what ``search/driver.py`` writes (``search.yaml``, ``summary.json``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmlsearch.search.cli import main
from dmlsearch.search.report import experiment_keys
from dmlsearch.search.results import load_results
from dmlsearch.search.report import report_command
from dmlsearch.search.report import tournament
from dmlsearch.trainables.errors import UserError

# -- tournament -----------------------------------------------------------------------------------

ROWS = [
    # experiment A: x 0.9 > y 0.8 > z 0.7 -> x 1, y 2, z 3 (x's second, worse row is ignored)
    {"bb": "A", "loss": "x", "s": 0.9}, {"bb": "A", "loss": "y", "s": 0.8},
    {"bb": "A", "loss": "z", "s": 0.7}, {"bb": "A", "loss": "x", "s": 0.1},
    # experiment B: z 0.6 > x 0.5 = y 0.5 -> z 1, x and y share ranks 2 and 3: 2.5 each
    {"bb": "B", "loss": "x", "s": 0.5}, {"bb": "B", "loss": "y", "s": 0.5},
    {"bb": "B", "loss": "z", "s": 0.6},
    # experiment C: y 0.4 > x 0.3, z failed (no score) -> y 1, x 2
    {"bb": "C", "loss": "x", "s": 0.3}, {"bb": "C", "loss": "y", "s": 0.4},
    {"bb": "C", "loss": "z", "s": None},
    # experiment D: one loss only, nothing to rank
    {"bb": "D", "loss": "x", "s": 0.99},
]


def test_tournament_max_hand_computed() -> None:
    table = tournament(ROWS, group_keys=["bb"], item_key="loss", score_key="s", mode="max")
    by = {r["item"]: r for r in table}
    # x: ranks 1, 2.5, 2 -> sum 5.5, mean 11/6, std sqrt(((5/6)^2 + (4/6)^2 + (1/6)^2) / 3)
    assert by["x"]["ranks"] == [1.0, 2.5, 2.0]
    assert by["x"]["sum"] == pytest.approx(5.5)
    assert by["x"]["mean"] == pytest.approx(11 / 6)
    assert by["x"]["std"] == pytest.approx(math.sqrt(14) / 6)
    # y: ranks 2, 2.5, 1 -> same sum, mean and std as x
    assert by["y"]["ranks"] == [2.0, 2.5, 1.0]
    assert by["y"]["mean"] == pytest.approx(11 / 6)
    assert by["y"]["std"] == pytest.approx(math.sqrt(14) / 6)
    # z: ranks 3, 1 (C failed, D absent) -> sum 4, mean 2, std 1
    assert by["z"]["ranks"] == [3.0, 1.0] and by["z"]["experiments"] == 2
    assert (by["z"]["sum"], by["z"]["mean"], by["z"]["std"]) == pytest.approx((4, 2, 1))
    assert by["x"]["experiments"] == 3  # D (one loss) is skipped
    # sorted by mean rank; x and y tie on mean and experiments: by name
    assert [r["item"] for r in table] == ["x", "y", "z"]


def test_tournament_min_mode_and_ties() -> None:
    rows = [
        {"e": 1, "loss": "a", "eer": 0.10}, {"e": 1, "loss": "b", "eer": 0.20},
        {"e": 1, "loss": "c", "eer": 0.20},
        {"e": 2, "loss": "a", "eer": 0.30}, {"e": 2, "loss": "b", "eer": 0.05},
        {"e": 2, "loss": "c", "eer": 0.30},
    ]
    table = tournament(rows, group_keys=["e"], item_key="loss", score_key="eer", mode="min")
    by = {r["item"]: r for r in table}
    # e1: a 1, b and c tie on 2-3 -> 2.5; e2: b 1, a and c tie on 2-3 -> 2.5
    assert by["a"]["ranks"] == [1.0, 2.5] and by["b"]["ranks"] == [2.5, 1.0]
    assert by["c"]["ranks"] == [2.5, 2.5]
    assert by["a"]["mean"] == pytest.approx(1.75) and by["a"]["std"] == pytest.approx(0.75)
    assert by["c"]["sum"] == pytest.approx(5.0) and by["c"]["std"] == pytest.approx(0.0)
    assert [r["item"] for r in table] == ["a", "b", "c"]
    # ranks within a group always sum to n(n+1)/2
    assert sum(r["ranks"][0] for r in table) == pytest.approx(6.0)
    with pytest.raises(ValueError):
        tournament(rows, group_keys=["e"], item_key="loss", score_key="eer", mode="up")


def test_experiment_keys_drop_loss_dependent_keys() -> None:
    configs = [{"loss": loss, "sampler": "m" if loss == "ms" else "r", "backbone": bb,
                "loss.margin": 0.1}
               for loss in ("ms", "pa", "st") for bb in ("resnet50", "bninception")]
    keys = experiment_keys(configs, ["loss", "sampler", "sampler", "backbone", "loss.margin"])
    assert keys == ["backbone"]


# -- reports on hand-made folders ----------------------------------------------------------------

def _trial(tid: str, score: float | None, config: dict[str, Any], state: str = "completed",
           best_epoch: int | None = 3) -> dict[str, Any]:
    return {"trial_id": tid, "state": state, "score": score, "iterations": 4, "seconds": 1.5,
            "reason": None if score is not None else "error",
            "best_epoch": best_epoch if score is not None else None, "config": config}


def _folder(tmp_path: Path, *, metric: str, trials: list[dict[str, Any]], searched: list[str],
            sampler: str = "tpe", best: str | None = None, name: str = "res") -> Path:
    out = tmp_path / name
    out.mkdir()
    resolved = {"space": "quickstart", "space_source": "name: quickstart\n",
                "options": {"space": "quickstart", "sampler": sampler, "scheduler": "asha",
                            "out": str(out)},
                "base": {"dataset": "glyphs", "protocol": "fixed", "metric": metric},
                "searched": searched, "code_revision": "abc", "dmlsearch": "0.1"}
    (out / "search.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    summary = {
        "metric": metric, "seconds": 161.0, "tracking_uri": f"sqlite:///{out}/mlflow.db",
        "trials": trials, "best_trial": best,
        "budget": {"trials": float(len(trials)), "epochs": 40.0, "trial_hours": 0.02,
                   "cpu_hours": 0.04, "gpu_hours": 0.0},
        "pareto_front": None,
        "test_metrics": {"recall@1": 0.61, "map@r": 0.25} if best else None,
        "fold_ensemble": None,
        "export": str(out / "best_config.yaml") if best else None,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return out


def _leaderboard_ids(text: str) -> list[str]:
    section = text.split("## Leaderboard", 1)[1].split("## Best", 1)[0]
    return [line.split("|")[2].strip() for line in section.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()]


def _cfg(loss: str, lr: float) -> dict[str, Any]:
    return {"loss": loss, "lr": lr, "embedding_size": 64, "epochs": 4, "dataset": "glyphs"}


@pytest.mark.parametrize(("metric", "order"), [("map@r", ["t2", "t0", "t1"]),
                                              ("eer", ["t1", "t0", "t2"])])
def test_report_leaderboard_respects_direction(tmp_path: Path, metric: str,
                                               order: list[str]) -> None:
    trials = [_trial("t0", 0.5, _cfg("ms", 1e-3)), _trial("t1", 0.2, _cfg("pa", 1e-4)),
              _trial("t2", 0.8, _cfg("ms", 3e-4), state="stopped"),
              _trial("t3", None, _cfg("pa", 1e-2), state="failed")]
    out = _folder(tmp_path, metric=metric, trials=trials, searched=["loss", "lr"], best=order[0])
    lines: list[str] = []
    assert report_command(out, echo=lines.append) == 0
    text = (out / "report.md").read_text()
    assert lines[0] == text
    assert _leaderboard_ids(text) == order
    assert "- dataset: glyphs" in text and "- protocol: fixed" in text
    assert f"val {metric}" in text and ("minimised" if metric == "eer" else "maximised") in text
    assert "CPU-hours: 0.040" in text and "wall time: 161 s" in text
    assert "| loss | lr |" in text  # the searched parameters are columns
    assert f"Trial {order[0]}:" in text and "recall@1 0.6100" in text
    assert f"dmlsearch train {out / 'best_config.yaml'}" in text
    assert "1 trial(s) without a score" in text
    assert f"`dmlsearch importance {out}` computes it" in text
    assert "Tournament" not in text  # not a grid study
    assert "Interrupted" not in text
    # --top 1 keeps only the best
    report_command(out, top=1, echo=lambda _: None)
    assert _leaderboard_ids((out / "report.md").read_text()) == order[:1]


def test_report_lists_seeded_retrains_and_the_registered_model(tmp_path: Path) -> None:
    trials = [_trial("t0", 0.5, _cfg("ms", 1e-3)), _trial("t1", 0.4, _cfg("pa", 1e-4))]
    out = _folder(tmp_path, metric="map@r", trials=trials, searched=["loss", "lr"], best="t0")
    summary = json.loads((out / "summary.json").read_text())
    summary["registered_model"] = "dmlsearch-res/3"
    summary["retrains"] = [
        {"trial_id": "t0", "rank": 1, "seeds": [0, 1, 2], "test_metrics": [{}, {}, {}],
         "mean": {"recall@1": 0.6, "map@r": 0.25, "num_queries": 100},
         "ci95": {"recall@1": 0.05, "map@r": 0.02, "num_queries": 0.0}},
        {"trial_id": "t1", "rank": 2, "seeds": [0, 1, 2], "test_metrics": [{}, {}, {}],
         "mean": {"recall@1": 0.5, "map@r": 0.2, "num_queries": 100},
         "ci95": {"recall@1": 0.04, "map@r": 0.03, "num_queries": 0.0}}]
    (out / "summary.json").write_text(json.dumps(summary))
    report_command(out, echo=lambda _: None)
    text = (out / "report.md").read_text()
    assert "| rank | trial | seeds | map@r | recall@1 |" in text  # the metric first
    assert "| 1 | t0 | 3 | 0.2500 ± 0.0200 | 0.6000 ± 0.0500 |" in text
    assert "| 2 | t1 | 3 | 0.2000 ± 0.0300 | 0.5000 ± 0.0400 |" in text
    assert "num_queries |" not in text
    assert "`dmlsearch-res/3`" in text


def test_report_reads_importance(tmp_path: Path) -> None:
    out = _folder(tmp_path, metric="map@r", trials=[_trial("t0", 0.5, _cfg("ms", 1e-3))],
                  searched=["loss", "lr"], best="t0")
    (out / "importance").mkdir()
    (out / "importance" / "importance.json").write_text(json.dumps({
        "study": "res", "objective": "objective", "trials": 9, "skipped": [],
        "analyses": [{"name": "common", "trials": 9, "params": ["lr", "loss"],
                      "importance": {"lr": 0.7, "loss": 0.3}, "main_effects": {},
                      "interactions": [], "marginals": {}}]}))
    report_command(out, echo=lambda _: None)
    text = (out / "report.md").read_text()
    assert "- common (9 trials): lr 0.700, loss 0.300" in text
    assert "computes it" not in text


def test_report_grid_study_gets_tournament(tmp_path: Path) -> None:
    scores = {  # backbone -> loss -> val recall@1
        "resnet50": {"ms": 0.60, "pa": 0.70, "st": 0.50},
        "bninception": {"ms": 0.65, "pa": 0.65, "st": 0.40},
    }
    trials, i = [], 0
    for bb, by_loss in scores.items():
        for loss, s in by_loss.items():
            cfg = {"loss": loss, "batch_sampler": "m_per_class" if loss == "ms" else "random",
                   "backbone": bb, "embedding_size": 64}
            trials.append(_trial(f"t{i}", s, cfg))
            i += 1
    out = _folder(tmp_path, metric="recall@1", trials=trials, sampler="grid", best="t1",
                  searched=["loss", "sampler", "sampler", "backbone", "embedding_size"])
    report_command(out, echo=lambda _: None)
    text = (out / "report.md").read_text()
    assert "## Tournament (thesis Table 11)" in text
    assert "2 experiments (one per combination of backbone, embedding_size)" in text
    section = text.split("## Tournament", 1)[1]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in section.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    # resnet50: pa 1, ms 2, st 3; bninception: ms and pa tie (1.5), st 3
    assert rows == [["1", "pa", "2", "2.5", "1.25", "0.25"],
                    ["2", "ms", "2", "3.5", "1.75", "0.25"],
                    ["3", "st", "2", "6", "3.00", "0.00"]]


def test_report_interrupted_search_reads_rays_trial_folders(tmp_path: Path) -> None:
    out = _folder(tmp_path, metric="map@r", trials=[], searched=["loss", "lr"])
    (out / "summary.json").unlink()
    for tid, loss, lr, result in (
        ("t0", "ms", 1e-3, {"score": 0.3, "best_epoch": 2, "trial_finished": 1}),
        ("t1", "pa", 1e-4, {"score": 0.6, "best_epoch": 3, "trial_finished": 1}),
        ("t2", "pa", 1e-3, {"score": 0.4, "best_epoch": 1, "trial_finished": 0}),
    ):
        folder = out / "ray" / "tune" / f"trial_{tid}"
        folder.mkdir(parents=True)
        (folder / "params.json").write_text(json.dumps({"loss": loss, "lr": lr}))
        (folder / "result.json").write_text(json.dumps({"trial_id": tid, **result}) + "\n")
    loaded = load_results(out)
    assert not loaded.finished and len(loaded.trials) == 3
    assert {t["trial_id"]: t["state"] for t in loaded.trials} == {
        "t0": "completed", "t1": "completed", "t2": "unfinished"}
    report_command(out, echo=lambda _: None)
    text = (out / "report.md").read_text()
    assert "**Interrupted search**" in text
    assert _leaderboard_ids(text) == ["t1", "t2", "t0"]
    assert "Test classes" in text and "not available" in text


def test_missing_results_is_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UserError, match="expected summary.json"):
        load_results(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no search results"):
        report_command(tmp_path / "empty", echo=lambda _: None)
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dmlsearch: error: no search results") and "\n" not in err
    assert not (tmp_path / "empty" / "report.md").exists()
