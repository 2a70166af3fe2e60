"""`dmlsearch export DIR`: the best trial(s) of a results folder as files `train` reads.

The results folder is built by hand, as search/driver.py writes it (summary.json, search.yaml).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmlsearch.search.cli import main
from dmlsearch.search.export import export_study
from dmlsearch.search.export import read_export
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError


def _trial(trial_id: str, score: float | None, *, state: str = "completed",
           best_epoch: int | None = 3, lr: float = 0.001, **config: Any) -> dict[str, Any]:
    sampled = {"dataset": "glyphs", "loss": "multi_similarity", "epochs": 8,
               "lr[multi_similarity]": lr, "loss.alpha[multi_similarity]": 2.0, **config}
    return {"trial_id": trial_id, "state": state, "score": score, "iterations": 4,
            "seconds": 1.0, "reason": None, "best_epoch": best_epoch, "config": sampled}


def _results(tmp_path: Path, metric: str, trials: list[dict[str, Any]]) -> Path:
    out = tmp_path / "dmlsearch-quickstart-20260101-000000"
    out.mkdir()
    for t in trials:
        t["config"].setdefault("metric", metric)
    (out / "summary.json").write_text(json.dumps({"metric": metric, "trials": trials}))
    (out / "search.yaml").write_text(yaml.safe_dump({"code_revision": "abc123+dirty",
                                                     "base": {"metric": metric}}))
    return out


TRIALS = [("a", 0.2), ("b", 0.05), ("c", None), ("d", 0.5), ("e", 0.9)]


def _make(tmp_path: Path, metric: str) -> Path:
    trials = [_trial(i, s, lr=0.001 * (n + 1)) for n, (i, s) in enumerate(TRIALS)]
    trials[-1]["state"] = "failed"  # a failed trial is never exported, whatever its score
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
    assert config == TrialConfig.from_flat(config).to_flat()  # every setting, resolved


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
    results = tmp_path / "study"
    for name, score, finished in [("t1", 0.3, 1), ("t2", 0.6, 0), ("t3", float("inf"), 0)]:
        folder = results / "ray" / "tune" / f"dmltrial_{name}"
        folder.mkdir(parents=True)
        (folder / "params.json").write_text(json.dumps(
            {"loss": "multi_similarity", "metric": "eer", "lr[multi_similarity]": 0.01}))
        (folder / "result.json").write_text(json.dumps(
            {"trial_id": name, "score": score, "best_epoch": 2, "trial_finished": finished})
            + "\n")
    [path] = export_study(results)
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
    results = _results(tmp_path, "map@r", [_trial("a", None), _trial("b", 0.1,
                                                                    state="failed")])
    with pytest.raises(UserError, match="no trial with a validation score"):
        export_study(results)
    with pytest.raises(UserError, match="--top must be at least 1"):
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
