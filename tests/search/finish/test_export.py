"""`dmlsearch export DIR`: the best trial(s) of a results folder as files `train` reads (the
folder made with the project's own StudyDir and Summary); the export's format read back."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dmlsearch.search.cli import main
from dmlsearch.search.finish.export import export_study
from dmlsearch.search.finish.export import read_export
from dmlsearch.search.finish.export import write_export
from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import TrialState
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.setting_kinds import of_kind
from tests.helpers import add_ray_trial
from tests.helpers import make_study
from tests.helpers import trial_record


def _trial(trial_id: str, score: float | None, *, state: str = "completed",
           best_epoch: int | None = 3, lr: float = 0.001, **config: Any) -> TrialRecord:
    flat = {"dataset": "glyphs", "loss": "multi_similarity", "epochs": 8, "lr": lr,
            "loss.alpha": 2.0, **config}
    return trial_record(trial_id, score, state=state, best_epoch=best_epoch, config=flat)


def _results(tmp_path: Path, metric: str, trials: list[TrialRecord]) -> Path:
    trials = [dataclasses.replace(t, config={"metric": metric, **t.config}) for t in trials]
    return make_study(tmp_path, metric=metric, trials=trials, searched=["lr"],
                      name="dmlsearch-quickstart-20260101-000000").path


TRIALS = [("a", 0.2), ("b", 0.05), ("c", None), ("d", 0.5), ("e", 0.9)]


def _make(tmp_path: Path, metric: str) -> Path:
    trials = [_trial(i, s, lr=0.001 * (n + 1)) for n, (i, s) in enumerate(TRIALS)]
    trials[-1] = dataclasses.replace(trials[-1], state=TrialState.FAILED)  # never exported
    return _results(tmp_path, metric, trials)


@pytest.mark.parametrize(("metric", "best"), [("map@r", "d"), ("eer", "b")])
def test_exports_the_best_trial_in_the_metric_direction(tmp_path: Path, metric: str,
                                                        best: str) -> None:
    results = _make(tmp_path, metric)
    [path] = export_study(results)
    assert path == results / "export" / "best_config.yaml"
    config, provenance = read_export(path)
    assert provenance["trial_id"] == best
    assert provenance["study"] == results.name
    assert provenance["code_revision"] == "abc123+dirty"
    assert provenance["validation"]["metric"] == metric
    assert provenance["validation"]["best_epoch"] == 3
    assert "best validation epoch" in provenance["epochs_note"]
    assert config["epochs"] == 3  # as the retrain: the trial's best validation epoch
    # every setting of its input kind, resolved
    assert config == of_kind(TrialConfig.from_flat(config).to_flat())


def test_top_k_writes_one_file_per_trial_in_rank_order(tmp_path: Path) -> None:
    results = _make(tmp_path, "map@r")
    target = tmp_path / "picked" / "cfg.yaml"
    assert main(["export", str(results), "--top", "2", "--out", str(target)]) == 0
    assert sorted(p.name for p in target.parent.iterdir()) == ["cfg-2.yaml", "cfg.yaml"]
    ranked = []
    for path in (target, target.with_name("cfg-2.yaml")):
        config, provenance = read_export(path)
        cfg = TrialConfig.from_flat(config)
        ranked.append((provenance["trial_id"], provenance["validation"]["value"], cfg.lr))
        assert cfg.loss_params["alpha"] == 2.0 and cfg.metric == "map@r"
    assert ranked == [("d", 0.5, pytest.approx(0.004)), ("a", 0.2, pytest.approx(0.001))]
    # more than there are scored trials: all of them (3), no error
    assert len(export_study(results, top=10, out=target)) == 3


def test_interrupted_search_exports_from_ray_trial_folders(tmp_path: Path) -> None:
    study_dir = StudyDir(tmp_path / "study")
    for name, score, finished in [("t1", 0.3, 1), ("t2", 0.6, 0), ("t3", float("inf"), 0)]:
        add_ray_trial(study_dir, name, {"loss": "multi_similarity", "metric": "eer", "lr": 0.01},
                      [{"score": score, "best_epoch": 2, "trial_finished": finished}])
    [path] = export_study(study_dir.path)
    assert read_export(path)[1]["trial_id"] == "t1"  # eer: lowest; inf = never evaluated


def test_a_secret_from_the_environment_is_never_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    results = _results(tmp_path, "map@r", [_trial("a", 0.5, data_root=secret)])
    with pytest.raises(UserError, match="secret environment variable"):
        export_study(results)
    assert not (results / "export").exists()
    assert secret not in "".join(p.read_text() for p in results.rglob("*.yaml")
                                 if p.name != "search.yaml")


def test_only_user_paths_are_written(tmp_path: Path) -> None:
    results = _results(tmp_path, "map@r", [_trial("a", 0.5, data_root="/data/cub200")])
    [path] = export_study(results)
    text = path.read_text()
    assert "/data/cub200" in text  # the user's own path
    assert str(tmp_path) not in text  # not the results folder, not --out


def test_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UserError, match=r"missing \(no such folder\): expected summary.json"):
        export_study(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no search results in .*empty: expected summary.json"):
        export_study(empty)
    results = _results(tmp_path / "y", "map@r", [_trial("a", None),
                                                _trial("b", 0.1, state="failed")])
    with pytest.raises(UserError, match="no trial with a validation score"):
        export_study(results)
    with pytest.raises(UserError, match="--top must be an integer >= 1, got 0"):
        export_study(results, top=0)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    (tmp_path / "x").mkdir()
    good = _make(tmp_path / "x", "map@r")
    with pytest.raises(UserError, match="cannot write"):
        export_study(good, out=blocker / "sub" / "cfg.yaml")
    assert main(["export", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dmlsearch: error:") and "\n" not in err


def test_an_export_holds_only_the_settings_of_its_input_kind(tmp_path: Path) -> None:
    audio = ("audio_features", "n_features", "vad", "cmn_window", "max_frames", "trial_list")
    image = ("image_size", "cache", "cache_limit_gb", "train_crops")
    results = _results(tmp_path, "map@r", [_trial("a", 0.5)])
    [path] = export_study(results)
    config, _ = read_export(path)
    assert not set(audio) & set(config) and set(image) <= set(config)
    assert TrialConfig.from_flat(config) == TrialConfig.from_flat(
        {**config, **{k: getattr(TrialConfig(), k) for k in audio}})  # the defaults they had
    speakers = tmp_path / "speakers.yaml"
    write_export(speakers, config={**TrialConfig().to_flat(), "dataset": "speakers",
                                   "backbone": "tdnn_small"}, provenance={})
    config, _ = read_export(speakers)
    assert not set(image) & set(config) and set(audio) <= set(config)
