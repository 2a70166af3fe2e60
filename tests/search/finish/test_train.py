"""``dmlsearch train`` of an exported configuration: a real retrain on the built-in data with two
seeds, its test metrics, retrieval gallery and MLflow runs, and errors that name the exported
file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from dmlsearch.search.finish.export import write_export
from dmlsearch.search.finish.retrain_runs import GALLERY_ARTIFACTS
from dmlsearch.search.finish.train import train_command
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.trainables.errors import UserError
from tests.helpers import read_png
from tests.helpers import small_config


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))


def test_training_an_export_with_two_seeds(tmp_path: Path) -> None:
    export = tmp_path / "best_config.yaml"
    write_export(export, config=small_config(epochs=1, embedding_size=16).to_flat(),
                 provenance={"study": "s1"})
    out = tmp_path / "train"
    lines: list[str] = []
    outcome = train_command(export, out=out, mlflow_uri=None, sets=(("seed", 5),), seeds=2,
                            echo=lines.append)
    assert outcome.seeds == [5, 6] and len(outcome.runs) == 2
    assert json.loads((out / "test_metrics.json").read_text()) == outcome.runs[0].test_metrics
    seeds = json.loads((out / "seeds.json").read_text())
    assert seeds["seeds"] == [5, 6] and seeds["mean"] == pytest.approx(outcome.mean)
    assert lines[0].startswith("Trained multi_similarity on glyphs for 1 epoch ")
    # The test metrics come with the size of the test set, measured as they count it; the
    # count itself is no metric (issue 35).
    queries = outcome.runs[0].test_metrics["num_queries"]
    assert lines[0].endswith(f" classes, {queries:,} queries), evaluated once:")
    assert "num_queries" not in "\n".join(lines) and "num_queries" not in seeds["mean"]
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("dmlsearch-train").experiment_id])
    assert sorted(r.data.tags["dmlsearch.seed"] for r in runs) == ["5", "6"]
    assert {r.data.tags["dmlsearch.exported_from"] for r in runs} == {"s1"}
    # The first seed's retrieval gallery, in the results folder and on its run.
    study_dir = StudyDir(out)
    read_png(study_dir.retrievals_png)
    assert not study_dir.hard_pairs_png.exists()  # no learned distance
    assert f"What it retrieves (test queries and their nearest neighbours): " \
        f"{study_dir.retrievals_png}" in lines
    gallery = {r.data.tags["dmlsearch.seed"]: [a.path for a in client.list_artifacts(
        r.info.run_id, GALLERY_ARTIFACTS)] for r in runs}
    assert gallery == {"5": [f"{GALLERY_ARTIFACTS}/retrievals.png"], "6": []}


def test_errors_name_the_exported_file(tmp_path: Path) -> None:
    export = tmp_path / "edited.yaml"
    write_export(export, config={"epochs": "three"}, provenance={})
    with pytest.raises(UserError, match="edited.yaml: config: epochs must be an integer, got "
                                        "'three'; fix it in edited.yaml"):
        train_command(export, out=tmp_path / "o", mlflow_uri=None, sets=(), seeds=1)
    with pytest.raises(UserError, match="--seeds must be an integer >= 1"):
        train_command(export, out=tmp_path / "o", mlflow_uri=None, sets=(), seeds=0)
    assert not (tmp_path / "o").exists()


def test_a_setting_of_the_other_input_kind_is_refused_from_set_and_from_the_export(
        tmp_path: Path) -> None:
    """Given by the user, it is refused, not ignored; an export written when every setting was
    exported (at its default) still trains."""
    export = tmp_path / "best_config.yaml"
    write_export(export, config=small_config(epochs=1).to_flat(), provenance={})
    with pytest.raises(UserError, match=r"^max_frames is a setting of audio datasets, but "
                                        r"dataset glyphs is image data: it would be ignored; "
                                        r"remove max_frames from --set"):
        train_command(export, out=tmp_path / "o", mlflow_uri=None, sets=(("max_frames", 300),),
                      seeds=1)
    edited = tmp_path / "edited.yaml"
    edited.write_text("dmlsearch_export: 1\nconfig:\n  dataset: glyphs\n  max_frames: 200\n")
    with pytest.raises(UserError, match=r"edited.yaml: config: max_frames is a setting of audio "
                                        r"datasets.*remove max_frames from edited.yaml"):
        train_command(edited, out=tmp_path / "o", mlflow_uri=None, sets=(), seeds=1)
    assert not (tmp_path / "o").exists()
