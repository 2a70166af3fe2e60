"""What the driver hands the Ray Tune layer: the experiment's name follows its folder, local or
in a bucket."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import tune_settings


def test_the_experiment_is_named_after_its_folder() -> None:
    assert tune_settings(experiment=Path("/r/out/ray/tune")).name == "tune"
    assert tune_settings(experiment="s3://b/runs/out/tune").name == "tune"
    assert tune_settings(experiment="gs://b/x/").name == "x"
