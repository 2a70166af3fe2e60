"""A search as a Ray Tune experiment (real local Ray, real SQLite Optuna study, the real
trainable on the built-in data): one record per trial, configurations in setting keys, the
Optuna study holding the same trials; a folder with no experiment cannot be resumed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from dmlsearch.search.results import TrialState
from dmlsearch.search.tune import can_resume
from dmlsearch.search.tune import create_storage
from dmlsearch.search.tune import run_tune
from dmlsearch.search.tune.study import RAY_TRIAL_ID
from dmlsearch.spaces import Space
from dmlsearch.spaces import load_space
from tests.helpers import Heard
from tests.helpers import tune_settings


def _space(tmp_path: Path) -> Space:
    path = tmp_path / "space.yaml"
    path.write_text(
        "name: tiny\nsource: a test space\n"
        "base: {dataset: glyphs, epochs: 2, batch_size: 32, m_per_class: 4, embedding_size: 16,"
        " metric: map@r, threads: 1}\n"
        "params:\n"
        "  - loss: {type: categorical, choices: [multi_similarity, proxy_anchor]}\n"
        "  - loss.margin: {type: float, low: 0.1, high: 0.5, step: 0.1,"
        " when: {loss: multi_similarity}}\n"
        "  - loss.margin: {type: float, low: 0.1, high: 0.3, step: 0.1,"
        " when: {loss: proxy_anchor}}\n")
    return load_space(path)


@pytest.mark.slow
def test_run_tune_gives_one_record_per_trial_in_setting_keys(
        tmp_path: Path, local_ray: Path) -> None:
    space = _space(tmp_path)
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    create_storage(url)
    settings = tune_settings(storage_path=tmp_path / "ray", experiment=tmp_path / "ray" / "tune",
                             num_samples=2, concurrency=2, max_iterations=2, scheduler="none",
                             optuna_storage=url, study_name="tiny", sampler="random")
    heard = Heard()
    points: list[dict[str, Any]] = [{"loss": "multi_similarity",
                                     "loss.margin[multi_similarity]": 0.2},
                                    {"loss": "proxy_anchor", "loss.margin[proxy_anchor]": 0.3}]
    records = run_tune(settings, define_by_run=space.define_by_run, warm_starts=points,
                       events=heard)
    assert len(records) == 2 and {r.state for r in records} == {TrialState.COMPLETED}
    margins = {r.config["loss"]: r.config["loss.margin"] for r in records}
    assert margins == {"multi_similarity": pytest.approx(0.2), "proxy_anchor": pytest.approx(0.3)}
    for record in records:
        assert not any("[" in key for key in record.config)  # decoded once, by the searcher
        assert record.config == heard.started[record.trial_id]
        assert record.iterations == 2 and record.score is not None and record.best_epoch
    study = optuna.load_study(study_name="tiny", storage=url)
    assert sorted(t.user_attrs[RAY_TRIAL_ID] for t in study.trials) == sorted(
        r.trial_id for r in records)
    assert can_resume(settings)


def test_a_folder_without_an_experiment_cannot_be_resumed(tmp_path: Path) -> None:
    assert not can_resume(tune_settings(experiment=tmp_path / "ray" / "tune"))
