"""What a cluster search needs from ``dmlsearch run``: retries of trials whose node died
(``--max-failures``), Ray Tune's results on storage every node shares (``--storage``), trials
packed by their resources (fractional GPUs), data-loading workers sized from the trial's CPUs,
and the entry script ``cluster/run_search.py`` taking the very options of ``dmlsearch run``."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from dmlsearch.search.cli import build_parser
from dmlsearch.search.lifecycle import tune_settings as search_tune_settings
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.options import check_storage
from dmlsearch.search.options import data_workers
from dmlsearch.search.options import resolve_storage
from dmlsearch.search.prepare import Prepared
from dmlsearch.search.prepare import prepare
from dmlsearch.search.readback import load_summary
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.spaces import load_space
from dmlsearch.search.tune.tuner import trainable as tune_trainable
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from tests.helpers import REPO as ROOT
from tests.helpers import add_ray_trial
from tests.helpers import tune_settings


def test_max_failures_reaches_ray_tunes_failure_config() -> None:
    args = build_parser().parse_args(["run", "--max-failures", "5"])
    assert SearchOptions.from_args(args).max_failures == 5
    unset = SearchOptions.from_args(build_parser().parse_args(["run"]))
    assert unset.max_failures == SearchOptions().max_failures == 2
    prepared = Prepared(space=load_space("quickstart"), base=TrialConfig(),
                        max_iterations=4, trials=2, points=[])
    settings = search_tune_settings(SearchOptions(max_failures=5, gpus_per_trial=0), prepared,
                              StudyDir(Path("/x/out")))
    assert settings.max_failures == 5
    assert settings.storage_path == Path("/x/out/ray")
    assert settings.experiment == Path("/x/out/ray/tune")


def test_negative_max_failures_is_a_one_line_user_error() -> None:
    with pytest.raises(UserError, match="--max-failures must be an integer >= 0") as caught:
        dataclasses.replace(SearchOptions(), max_failures=-1).check()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("storage", ["/mnt/nfs/dmlsearch", "shared", "s3://bucket/prefix",
                                     "gs://bucket", "file:///tmp/x", "S3://Bucket/p/"])
def test_shared_storage_may_be_a_folder_or_a_bucket(storage: str) -> None:
    check_storage(storage)
    SearchOptions(storage=storage).check()


@pytest.mark.parametrize("storage", ["ftp://host/x", "s3://", "gs:///", "", "  "])
def test_unusable_storage_is_a_one_line_user_error(storage: str) -> None:
    with pytest.raises(UserError, match="--storage must be a folder all nodes share") as caught:
        SearchOptions(storage=storage).check()
    assert "\n" not in str(caught.value)


def test_each_search_gets_its_own_folder_in_shared_storage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "search-1"
    assert StudyDir(out).ray_storage == out / "ray"
    assert StudyDir(out, "s3://b/runs/").ray_storage == "s3://b/runs/search-1"
    monkeypatch.chdir(tmp_path)
    assert StudyDir(out, "shared").ray_storage == tmp_path / "shared" / "search-1"
    assert StudyDir(out, "gs://b/runs").tune_experiment == "gs://b/runs/search-1/tune"
    assert StudyDir(out).tune_experiment == out / "ray" / "tune"


def test_a_storage_folder_is_recorded_absolute_and_a_uri_as_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_storage("shared") == str(tmp_path / "shared")
    assert resolve_storage("s3://b/p") == "s3://b/p"
    args = build_parser().parse_args(["run", "--storage", "shared"])
    assert SearchOptions.from_args(args).storage == str(tmp_path / "shared")  # made absolute


def test_reports_of_an_interrupted_study_read_its_trials_from_the_storage_folder(
        tmp_path: Path) -> None:
    out, shared = tmp_path / "search-1", tmp_path / "shared"
    out.mkdir()
    StudyDir(out).write_resolved({"options": {"storage": str(shared)},
                                  "base": {"metric": "map@r"}})
    add_ray_trial(StudyDir(out, str(shared)), "abc", {"loss": "multi_similarity"},
                  [{"score": 0.5, "trial_finished": 0}])
    _, summary = load_summary(out)
    assert [(t.trial_id, t.state.value, t.score) for t in summary.trials] == [
        ("abc", "unfinished", 0.5)]


def test_trials_ask_for_fractional_gpus_packed_on_one_node() -> None:
    trainable = tune_trainable(tune_settings(cpus_per_trial=4, gpus_per_trial=0.25))
    request = trainable._resources  # what Ray Tune reserves per trial
    assert request.bundles == [{"CPU": 4.0, "GPU": 0.25}]
    assert request.strategy == "PACK"


@pytest.mark.parametrize(("cpus", "workers"), [(0.5, 0), (1, 0), (1.5, 0), (2, 1), (6, 5)])
def test_data_workers_leave_one_cpu_to_training(cpus: float, workers: int) -> None:
    assert data_workers(cpus) == workers


def test_a_trials_data_workers_come_from_its_cpus_unless_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))
    assert prepare(SearchOptions(cpus_per_trial=4)).base.workers == 3
    assert prepare(SearchOptions(cpus_per_trial=4, sets=(("workers", 0),))).base.workers == 0
    one_cpu = prepare(SearchOptions())
    assert one_cpu.base.workers == 0 and "workers" not in one_cpu.space.default_config()


def test_the_entry_script_takes_the_options_of_dmlsearch_run() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                              timeout=120, cwd=ROOT)

    script = run("cluster/run_search.py", "--help")
    cli = run("-m", "dmlsearch.search.cli", "run", "--help")
    assert script.returncode == cli.returncode == 0
    assert script.stdout == cli.stdout and "--max-failures" in cli.stdout
    bad = run("cluster/run_search.py", "--max-failures", "-2", "--storage", "s3://b")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "dmlsearch: error: --max-failures must be an integer >= 0 (retries of a trial whose "
        "node died), got -2; use 0 to never retry"]
