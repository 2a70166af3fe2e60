"""A real preview search end to end: ``dmlsearch run --space memvir_search --preview`` (CARS196,
BN-Inception, 2,000 epochs, 4-fold, on the command line) searched on the built-in glyphs data for
2 trials through Ray Tune, Optuna and MLflow, with its retrain: the published recipes run first,
at the preview's size, as k-fold."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.slow


def test_the_memvir_search_previews_in_a_real_search(tmp_path: Path,
                                                    shared_cache: Path) -> None:
    out = tmp_path / "results"
    proc = run_cli("run", "--space", "memvir_search", "--preview", "--trials", "2",
                   "--concurrency", "2", "--out", str(out), cache=shared_cache,
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # What the preview changed is printed before the search starts.
    head = proc.stdout[:proc.stdout.index("dmlsearch: 2 trials")]
    assert "preview: memvir_search on the built-in glyphs data" in head
    for setting in ("dataset", "backbone", "epochs", "folds"):
        assert f"\n  {setting} " in head, head
    body = json.loads((out / "summary.json").read_text())
    assert len(body["trials"]) == 2
    states = {t["state"] for t in body["trials"]}
    assert "completed" in states and states <= {"completed", "pruned"}
    # The published CARS196 recipes (Norm-softmax, Proxy-NCA) ran first, their warm-up scaled.
    configs = sorted((t["config"] for t in body["trials"]), key=lambda c: c["loss"])
    assert [c["loss"] for c in configs] == ["norm_softmax", "proxy_nca"]
    assert [(c["memvir_n"], c["memvir_warmup_epochs"]) for c in configs] == [(45, 1), (20, 1)]
    for config in configs:
        assert (config["dataset"], config["backbone"], config["device"]) == (
            "glyphs", "smallcnn", "cpu")
        assert (config["protocol"], config["folds"], config["epochs"]) == ("kfold", 2, 3)
    # A trial that trained to its end trained both folds for every epoch: 2 folds x 3 epochs.
    assert all(t["iterations"] == 6 for t in body["trials"] if t["state"] == "completed")
    assert "Search finished" in proc.stdout
    # --preview is an option of the search: resume finds it again in search.yaml.
    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    assert len(study.trials) == 2
    assert "preview: true" in (out / "search.yaml").read_text()
