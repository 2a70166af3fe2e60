"""``dmlsearch report``: report.md rendered from a results folder's summary (hand-made with the
project's own StudyDir and Summary), an interrupted search's trial folders, importance and the
tournament of a grid study."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dmlsearch.search.cli import main
from dmlsearch.search.reporting.markdown import report_command
from dmlsearch.search.results import EvalSet
from dmlsearch.search.results import RetrainSummary
from dmlsearch.trainables.errors import UserError
from tests.helpers import add_ray_trial
from tests.helpers import make_study
from tests.helpers import trial_record
from tests.search.reporting._studies import mixed_budgets


def _leaderboard_ids(text: str) -> list[str]:
    section = text.split("## Leaderboard", 1)[1].split("## Best", 1)[0]
    return [line.split("|")[2].strip() for line in section.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()]


def _cfg(loss: str, lr: float) -> dict[str, Any]:
    return {"loss": loss, "lr": lr, "embedding_size": 64, "epochs": 4, "dataset": "glyphs"}


@pytest.mark.parametrize(("metric", "order"), [("map@r", ["t0", "t1"]), ("eer", ["t1", "t0"])])
def test_report_leaderboard_respects_direction(tmp_path: Path, metric: str,
                                               order: list[str]) -> None:
    trials = [trial_record("t0", 0.5, config=_cfg("ms", 1e-3)),
              trial_record("t1", 0.2, config=_cfg("pa", 1e-4)),
              trial_record("t2", 0.8, config=_cfg("ms", 3e-4), state="pruned",
                           stopped_by="asha"),
              trial_record("t3", None, config=_cfg("pa", 1e-2), state="failed")]
    out = make_study(tmp_path, metric=metric, trials=trials, searched=["loss", "lr"],
                     best=order[0]).path
    lines: list[str] = []
    assert report_command(out, echo=lines.append) == 0
    text = (out / "report.md").read_text()
    assert lines[0] == text
    assert _leaderboard_ids(text) == order  # ranked: the trials that trained to their end
    board = text.split("## Leaderboard", 1)[1].split("## Best", 1)[0]
    assert "| - | t2 | pruned | 0.8000 |" in board  # its 0.8 is of fewer epochs: not ranked
    assert "- dataset: glyphs" in text and "- protocol: fixed" in text
    assert f"val {metric}" in text and ("minimised" if metric == "eer" else "maximised") in text
    assert "- 4 trials (2 completed, 1 pruned by asha, 1 failed)" in text
    assert "CPU-hours: 0.040" in text and "wall time: 161 s" in text
    assert "| loss | lr |" in text  # the searched parameters are columns
    assert f"Best trial {order[0]}:" in text and "recall@1 0.6100" in text
    assert f"dmlsearch train {out / 'best_config.yaml'}" in text
    assert "1 trial(s) without a score" in text
    # two trials trained to their end, no Optuna study to ask: the count, not a command
    assert "Not computed: 2 trials trained to their end, fANOVA needs 8." in text
    assert "computes it" not in text
    assert "Tournament" not in text  # not a grid study
    assert "Interrupted" not in text
    # --top 1 keeps only the best
    report_command(out, top=1, echo=lambda _: None)
    assert _leaderboard_ids((out / "report.md").read_text()) == order[:1]


def test_report_lists_seeded_retrains_and_the_registered_model(tmp_path: Path) -> None:
    trials = [trial_record("t0", 0.5, config=_cfg("ms", 1e-3)),
              trial_record("t1", 0.4, config=_cfg("pa", 1e-4))]
    retrains = [
        RetrainSummary(trial_id="t0", rank=1, seeds=[0, 1, 2], test_metrics=[{}, {}, {}],
                       mean={"recall@1": 0.6, "map@r": 0.25, "num_queries": 100},
                       ci95={"recall@1": 0.05, "map@r": 0.02, "num_queries": 0.0}),
        RetrainSummary(trial_id="t1", rank=2, seeds=[0, 1, 2], test_metrics=[{}, {}, {}],
                       mean={"recall@1": 0.5, "map@r": 0.2, "num_queries": 100},
                       ci95={"recall@1": 0.04, "map@r": 0.03, "num_queries": 0.0})]
    out = make_study(tmp_path, metric="map@r", trials=trials, searched=["loss", "lr"],
                     best="t0", retrains=retrains, registered_model="dmlsearch-res/3").path
    report_command(out, echo=lambda _: None)
    text = (out / "report.md").read_text()
    assert "| rank | trial | seeds | map@r | recall@1 |" in text  # the metric first
    assert "| 1 | t0 | 3 | 0.2500 ± 0.0200 | 0.6000 ± 0.0500 |" in text
    assert "| 2 | t1 | 3 | 0.2000 ± 0.0300 | 0.5000 ± 0.0400 |" in text
    assert "num_queries |" not in text
    assert "`dmlsearch-res/3`" in text


def test_report_says_the_size_of_the_sets_beside_their_scores(tmp_path: Path) -> None:
    """Issue 35: val 0.8259 and test 0.6059 printed together with no word that validation is
    12 classes / 240 queries and test 60 classes / 1,200; num_queries printed as a metric."""
    trials = [trial_record("t0", 0.8259, config=_cfg("ms", 1e-3))]
    one = RetrainSummary(trial_id="t0", rank=1, seeds=[0], test_metrics=[{}],
                         mean={"map@r": 0.6059}, ci95={"map@r": 0.0})
    out = make_study(tmp_path, metric="map@r", trials=trials, searched=["loss", "lr"],
                     best="t0", retrains=[one],
                     test_metrics={"recall@1": 0.7, "map@r": 0.6059, "num_queries": 1200},
                     validation_set=EvalSet(classes=12, images=240, queries=240),
                     test_set=EvalSet(classes=60, images=1200, queries=1200)).path
    report_command(out, echo=lambda _: None)
    text = (out / "report.md").read_text()
    assert ("- Validation set: 12 classes, 240 queries; classes held out of the training "
            "classes. Every trial is scored on it.") in text
    assert "- Test set: 60 classes, 1,200 queries; classes never used in the search." in text
    assert "- Validation and test scores are not comparable" in text
    assert "Best trial t0: val map@r 0.8259 (validation set: 12 classes, 240 queries)" in text
    assert ("The test set (60 classes, 1,200 queries), evaluated once after retraining on all "
            "training classes: recall@1 0.7000, map@r 0.6059") in text
    assert "num_queries" not in text


def test_report_reads_importance(tmp_path: Path) -> None:
    study_dir = make_study(tmp_path, metric="map@r", searched=["loss", "lr"], best="t0",
                           trials=[trial_record("t0", 0.5, config=_cfg("ms", 1e-3))])
    study_dir.importance.mkdir()
    study_dir.importance_json.write_text(json.dumps({
        "study": "res", "objective": "objective", "trials": 9, "skipped": [],
        "analyses": [{"name": "common", "trials": 9, "params": ["lr", "loss"],
                      "importance": {"lr": 0.7, "loss": 0.3}, "main_effects": {},
                      "interactions": [], "marginals": {}}]}))
    report_command(study_dir.path, echo=lambda _: None)
    text = study_dir.report_md.read_text()
    assert "- common (9 trials): lr 0.700, loss 0.300" in text
    assert "computes it" not in text


def test_report_says_why_importance_is_missing_as_the_command_would(tmp_path: Path) -> None:
    """A search too small for fANOVA: the report said "`dmlsearch importance DIR` computes it",
    a command that then refused. It says what the search said (read from its Optuna study), with
    the epoch that has enough trials; with enough, the command."""
    import optuna

    for complete in (3, 8):
        trials = [trial_record(f"t{i}", 0.5 - i / 100, config=_cfg("ms", 1e-3))
                  for i in range(complete)]
        out = make_study(tmp_path / f"s{complete}", metric="map@r", trials=trials,
                         searched=["loss", "lr"], best="t0").path
        stored = optuna.create_study(storage=f"sqlite:///{out / 'optuna.db'}",
                                     study_name=out.name, direction="maximize")
        stored.add_trials(mixed_budgets(complete=complete, pruned=6).trials)
        report_command(out, echo=lambda _: None)
        text = (out / "report.md").read_text().split("## Importance", 1)[1]
        if complete == 3:
            assert ("Not computed: 3 trials at full budget, needs 8; `dmlsearch importance "
                    f"{out} --at-epoch 1` analyses the 9 trials that reached epoch 1.") in text
            assert "computes it" not in text
        else:
            assert f"Not computed yet: `dmlsearch importance {out}` computes it" in text


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
            trials.append(trial_record(f"t{i}", s, config=cfg))
            i += 1
    out = make_study(tmp_path, metric="recall@1", trials=trials, sampler="grid", best="t1",
                     searched=["loss", "batch_sampler", "batch_sampler", "backbone",
                               "embedding_size"]).path
    report_command(out, echo=lambda _: None)
    text = (out / "report.md").read_text()
    assert "## Tournament (Psomas 2020, Table 11)" in text
    assert "2 experiments (one per combination of backbone, embedding_size)" in text
    section = text.split("## Tournament", 1)[1]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in section.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    # resnet50: pa 1, ms 2, st 3; bninception: ms and pa tie (1.5), st 3
    assert rows == [["1", "pa", "2", "2.5", "1.25", "0.25"],
                    ["2", "ms", "2", "3.5", "1.75", "0.25"],
                    ["3", "st", "2", "6", "3.00", "0.00"]]


def test_report_interrupted_search_reads_rays_trial_folders(tmp_path: Path) -> None:
    study_dir = make_study(tmp_path, metric="map@r", trials=[], searched=["loss", "lr"],
                           finished=False)
    for tid, loss, lr, result in (
        ("t0", "ms", 1e-3, {"score": 0.3, "best_epoch": 2, "trial_finished": 1}),
        ("t1", "pa", 1e-4, {"score": 0.6, "best_epoch": 3, "trial_finished": 1}),
        ("t2", "pa", 1e-3, {"score": 0.4, "best_epoch": 1, "trial_finished": 0}),
    ):
        add_ray_trial(study_dir, tid, {"loss": loss, "lr": lr}, [result])
    report_command(study_dir.path, echo=lambda _: None)
    text = study_dir.report_md.read_text()
    assert "**Interrupted search**" in text
    assert _leaderboard_ids(text) == ["t1", "t0"]
    assert "| - | t2 | unfinished | 0.4000 |" in text
    assert "The test classes, evaluated once" in text and "not available" in text
    assert "Validation set" not in text  # unknown to an interrupted search: not guessed


def test_missing_results_is_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no search results"):
        report_command(tmp_path / "empty", echo=lambda _: None)
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dmlsearch: error: no search results") and "\n" not in err
    assert not (tmp_path / "empty" / "report.md").exists()


def test_report_carries_the_importance_caveats(tmp_path: Path) -> None:
    """Issue 35: a branch analysed from 9 trials said nothing of it."""
    study_dir = make_study(tmp_path, metric="map@r", searched=["loss", "lr"], best="t0",
                           trials=[trial_record("t0", 0.5, config=_cfg("ms", 1e-3))])
    study_dir.importance.mkdir()
    study_dir.importance_json.write_text(json.dumps({
        "study": "res", "objective": "validation map@r", "trials": 9, "skipped": [],
        "budget": "epoch 2",
        "analyses": [{"name": "branch loss=pa", "trials": 9, "params": ["lr"],
                      "importance": {"lr": 0.9}, "interactions": [], "marginals": {},
                      "caveats": ["9 trials for 2 parameters, fewer than 10 per parameter"]}]}))
    report_command(study_dir.path, echo=lambda _: None)
    text = study_dir.report_md.read_text()
    assert ("fANOVA importance (the share of the variance of validation map@r each parameter "
            "explains alone) over 9 trials at epoch 2") in text
    assert ("- branch loss=pa (9 trials): lr 0.900 (caveat: 9 trials for 2 parameters, fewer "
            "than 10 per parameter)") in text
