"""A stop during Ray Tune's save of its experiment (Ray writes ``experiment_state-*.json`` and
``search_gen_state-*.json`` in place): ``dmlsearch resume`` restores from the newest save that
reads whole, and moves the cut one aside so that Ray's own choice of file agrees; with none
whole, a one-line error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dmlsearch.search.tune.restore import align_experiment
from dmlsearch.trainables.errors import UserError

WHOLE = {"trial_data": [], "runner_data": {}, "stats": {"start_time": 0.0}}


def _newest_for_ray(folder: Path) -> str:
    """The file Ray Tune restores from (its own lookup)."""
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint

    return Path(_find_newest_experiment_checkpoint(str(folder))).name


@pytest.mark.parametrize("cut", ["", '{"trial_data": [["{\\"trial_id'])
def test_a_save_cut_short_gives_way_to_the_previous_one(tmp_path: Path, cut: str) -> None:
    older = tmp_path / "experiment_state-2026-11-29_04-00-00.json"
    newer = tmp_path / "experiment_state-2026-11-29_05-00-00.json"
    older.write_text(json.dumps(WHOLE))
    newer.write_text(cut)
    assert _newest_for_ray(tmp_path) == newer.name  # what Ray would have read
    assert align_experiment(tmp_path, [], resources={"cpu": 1.0, "gpu": 0.0}) == []
    assert not newer.exists()
    assert (tmp_path / (newer.name + ".unreadable")).read_text() == cut  # kept, aside
    assert _newest_for_ray(tmp_path) == older.name
    assert json.loads(older.read_text()) == WHOLE


def test_with_no_whole_save_the_resume_is_refused_in_one_line(tmp_path: Path) -> None:
    only = tmp_path / "experiment_state-2026-11-29_05-00-00.json"
    only.write_text("")
    with pytest.raises(UserError) as caught:
        align_experiment(tmp_path, [], resources={"cpu": 1.0, "gpu": 0.0})
    text = str(caught.value)
    assert "\n" not in text and text.startswith(f"{only}: ")
    assert "empty or cut short" in text and "a new --out" in text
    assert only.read_text() == ""  # nothing changed


def test_the_trial_generators_save_cut_short_gives_way_too(tmp_path: Path) -> None:
    """Ray saves its trial generator's state (``search_gen_state-*.json``, pickled) beside
    the experiment, in place too."""
    from ray import cloudpickle

    (tmp_path / "experiment_state-2026-11-29_05-00-00.json").write_text(json.dumps(WHOLE))
    older = tmp_path / "search_gen_state-2026-11-29_04-00-00.json"
    newer = tmp_path / "search_gen_state-2026-11-29_05-00-00.json"
    older.write_bytes(cloudpickle.dumps({"counter": 3}))
    newer.write_bytes(cloudpickle.dumps({"counter": 4})[:-3])  # cut short
    assert align_experiment(tmp_path, [], resources={"cpu": 1.0, "gpu": 0.0}) == []
    assert not newer.exists() and (tmp_path / (newer.name + ".unreadable")).is_file()
    assert cloudpickle.loads(older.read_bytes()) == {"counter": 3}
    older.write_bytes(b"")  # now none whole: refused, nothing more moved
    with pytest.raises(UserError, match=f"^{re.escape(str(older))}: .* empty or cut short"):
        align_experiment(tmp_path, [], resources={"cpu": 1.0, "gpu": 0.0})
    assert older.exists()
