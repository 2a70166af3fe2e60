"""The options of run, compare, resume and record-curves: each defined once, with one owner of
every default; names, multi-objective combinations, durations, ranges and types are checked in
one place before anything runs; the options round-trip through search.yaml for ``resume``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from dmlsearch.search.cli import build_parser
from dmlsearch.search.options import ARGUMENTS
from dmlsearch.search.options import CompareOptions
from dmlsearch.search.options import ImportanceOptions
from dmlsearch.search.options import RecordCurvesOptions
from dmlsearch.search.options import ReportOptions
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.options import SharedOptions
from dmlsearch.search.options import parse_duration
from dmlsearch.search.options import parse_sets
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800),
                                               ("2h", 7200), ("1.5d", 129600), (" 2H ", 7200)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "two hours", "-5m", "0"])
def test_bad_durations_are_user_errors(text: str) -> None:
    with pytest.raises(UserError, match="--time-budget"):
        parse_duration(text)


@pytest.mark.parametrize(("changes", "message"), [
    ({"sampler": "bayes"}, "unknown sampler 'bayes' for --sampler; expected one of: cmaes, gp, "
                           "grid, nsga2, prior-tpe, priorband, priorband-tpe, random, tpe"),
    ({"scheduler": "pbt"}, "unknown scheduler 'pbt' for --scheduler; expected one of: asha, "
                           "hyperband, median, none, soft-asha"),
    ({"pareto": "latency"}, "--pareto must be one of embedding_size, parameters"),
    ({"pareto": "embedding_size", "sampler": "cmaes"}, "optimises one objective"),
    ({"sampler": "nsga2"}, "add --pareto"),
    ({"trials": 0}, "--trials must be an integer >= 1"),
    ({"time_budget_s": -1.0}, "--time-budget must be a number > 0"),
])
def test_impossible_options_are_one_line_user_errors(changes: dict, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(")) as caught:
        dataclasses.replace(SearchOptions(), **changes).check()
    assert "\n" not in str(caught.value)


def test_sets_are_typed_yaml_scalars() -> None:
    assert parse_sets(["epochs=3", "loss=proxy_anchor", "lr=1e-3", "freeze_bn=true"]) == (
        ("epochs", 3), ("loss", "proxy_anchor"), ("lr", 1e-3), ("freeze_bn", True))
    for bad in ("epochs", "=3", "a=[1, 2]"):
        with pytest.raises(UserError, match="--set"):
            parse_sets([bad])


def test_words_yaml_1_1_read_as_booleans_stay_words() -> None:
    """``--set cache=off`` is the word the setting documents (YAML 1.1 read it as False);
    a boolean setting still takes yes/no/on/off."""
    sets = dict(parse_sets(["cache=off", "channels_last=off", "compile=yes", "freeze_bn=False"]))
    assert sets == {"cache": "off", "channels_last": "off", "compile": "yes", "freeze_bn": False}
    cfg = TrialConfig.from_flat(sets)
    assert (cfg.cache, cfg.channels_last, cfg.compile, cfg.freeze_bn) == ("off", False, True, "off")


def test_options_round_trip_through_search_yaml(tmp_path: Path) -> None:
    opts = SearchOptions(space="quickstart", trials=7, sets=(("epochs", 3),), seed=5,
                         time_budget_s=90.0, out=tmp_path)
    body = opts.to_json()
    assert body["sets"] == {"epochs": 3} and body["out"] == str(tmp_path)
    assert SearchOptions.from_json({**body, "unknown": 1}, out=tmp_path) == opts


@pytest.mark.parametrize(("command", "args", "message"), [
    # 0 once ran with the default grace period (``0 or max/4``): now it is out of range
    ("run", ["--grace-period", "0"], "--grace-period must be an integer >= 1"),
    ("compare", ["--grace-period", "-1"], "--grace-period must be an integer >= 1"),
    ("run", ["--seed", "-1"], "--seed must be an integer >= 0, got -1"),
    ("run", ["--replay-speedup", "0"], "--replay-speedup must be a number > 0, got 0"),
    ("run", ["--cpus-per-trial", "0"], "--cpus-per-trial must be a number > 0"),
    ("compare", ["--seeds", "1"], "--seeds must be an integer >= 2"),
    ("compare", ["--trials", "0"], "--trials must be an integer >= 1 (trials per method), got 0"),
    ("compare", ["--trials", "2", "--budget", "1h"], "--budget and --trials"),
    ("compare", ["--sampler", "grid"], "--sampler grid trains a space's whole grid"),
    ("record-curves", ["--space", "g", "--out", "t.jsonl", "--workers", "0"],
     "--workers must be an integer >= 1, got 0"),
    ("record-curves", ["--space", "g", "--out", "t.jsonl", "--second-seed", "-2"],
     "--second-seed must be an integer >= 0, got -2"),
    ("record-curves", ["--space", "g", "--out", "t.jsonl", "--repeat-seeds", "1"],
     "--repeat-seeds must be an integer >= 2, got 1"),
    ("record-curves", ["--space", "g", "--out", "t.jsonl", "--repeat-seeds", "3", "--sample",
                       "9"], "--repeat-seeds adds seeds to the configurations t.jsonl already "
     "repeats and trains nothing else, but --sample asks for the table's design too"),
    ("record-curves", ["--space", "g", "--out", "t.jsonl", "--repeat-seeds", "3",
                       "--second-seed", "2"], "but --second-seed asks for the table's design"),
    ("importance", ["res", "--min-trials", "1"], "--min-trials must be an integer >= 2, got 1"),
    ("importance", ["res", "--at-epoch", "0"],
     "--at-epoch must be an integer >= 1 (epochs over all folds), got 0"),
    ("report", ["res", "--top", "0"], "--top must be an integer >= 1, got 0"),
])
def test_every_commands_values_are_checked_in_one_place(command: str, args: list[str],
                                                        message: str) -> None:
    parsed = build_parser().parse_args([command, *args])
    options = {"run": SearchOptions, "compare": CompareOptions,
               "record-curves": RecordCurvesOptions, "importance": ImportanceOptions,
               "report": ReportOptions}[command]
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        options.from_args(parsed).check()
    assert "\n" not in str(caught.value)


def test_the_defaults_are_the_options_objects_and_run_and_compare_share_them() -> None:
    parser = build_parser()
    run = SearchOptions.from_args(parser.parse_args(["run"]))
    compare = CompareOptions.from_args(parser.parse_args(["compare"]))
    assert run == SearchOptions() and compare == CompareOptions()
    for field in dataclasses.fields(SharedOptions):
        assert getattr(run, field.name) == getattr(compare, field.name), field.name
    assert compare.methods  # the built-in demo's methods
    # each method's search is a run with the comparison's shared options
    method = compare.search_options("contrastive")
    assert {f.name: getattr(method, f.name) for f in dataclasses.fields(SharedOptions)} == {
        f.name: getattr(compare, f.name) for f in dataclasses.fields(SharedOptions)}
    # one definition per option and command
    keys = [(a.field, c) for a in ARGUMENTS for c in a.commands]
    assert len(keys) == len(set(keys))


def test_the_default_sampler_is_the_benchmarks_choice_and_prior_tpe_with_prior_from() -> None:
    """The default search is the method benchmarks/search_efficiency.py chose across its tables
    (``DEFAULT_METHOD``, with ASHA); with --prior-from it is the one the transfer benchmark
    measured (``TRANSFER_BASE``), unless --sampler or --pareto (tpe takes two objectives) says
    otherwise; a given sampler is kept, and a resumed search keeps the one it ran with."""
    from benchmarks.search_efficiency import DEFAULT_METHOD
    from benchmarks.search_efficiency import METHODS
    from benchmarks.search_efficiency import TRANSFER_BASE

    parser = build_parser()
    run = SearchOptions.from_args(parser.parse_args(["run"]))
    assert METHODS[DEFAULT_METHOD][:2] == (run.sampler, run.scheduler) == ("tpe", "asha")
    run.check()
    assert CompareOptions().sampler == "tpe"
    pareto = SearchOptions.from_args(parser.parse_args(["run", "--pareto", "embedding_size"]))
    assert pareto.sampler == "tpe"
    pareto.check()
    transfer = SearchOptions.from_args(parser.parse_args(["run", "--prior-from", "a", "b"]))
    assert METHODS[TRANSFER_BASE][:2] == (transfer.sampler, transfer.scheduler)
    assert transfer.sampler == "prior-tpe"
    for given, sampler in ((["--sampler", "random"], "random"),
                           (["--pareto", "embedding_size"], "tpe")):
        args = parser.parse_args(["run", "--prior-from", "a", *given])
        assert SearchOptions.from_args(args).sampler == sampler
    assert SearchOptions(sampler="random").sampler == "random"
    stored = SearchOptions(sampler="tpe").to_json()
    assert SearchOptions.from_json(stored, out=Path(".")).sampler == "tpe"


def test_one_search_named_twice_for_a_prior_is_refused(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """--prior-from (and the Python API's ``prior_from``) names each search once, however the
    folder is written: counted twice, one search would weigh as two that agree."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    SearchOptions(prior_from=("a", "b")).check()
    for twice in (("a", "b", "./a/"), (str(tmp_path / "a"), "b/../a")):
        with pytest.raises(UserError, match=re.escape(
                f"--prior-from names {tmp_path / 'a'} 2 times; give each search once")):
            SearchOptions(prior_from=twice).check()


@pytest.mark.parametrize(("changes", "message"), [
    ({"concurrency": "two"}, "--concurrency must be an integer, got 'two'"),
    ({"cpus_per_trial": True}, "--cpus-per-trial must be a number, got True"),
    ({"retrain": "perhaps"}, "--no-retrain must be true or false, got 'perhaps'"),
    ({"seed": 1.5}, "--seed must be an integer, got 1.5"),
])
def test_a_value_of_the_wrong_type_is_a_user_error(changes: dict, message: str) -> None:
    """What a hand-edited search.yaml can hold: ``resume`` checks it as the parser would."""
    body = {**SearchOptions().to_json(), **changes}
    with pytest.raises(UserError, match=re.escape(message)):
        SearchOptions.from_json(body, out=Path("x")).check()


def test_mlflow_tracking_uri_from_the_environment_unless_given(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """MLflow's convention: ``MLFLOW_TRACKING_URI`` names the store; ``--mlflow-uri`` wins;
    the store used is recorded with the options, so a resume writes to it whatever its
    environment says."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert SearchOptions().mlflow_uri is None  # the results folder's mlflow.db
    shared = f"sqlite:///{tmp_path / 'all.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", shared)
    assert SearchOptions().mlflow_uri == shared
    assert CompareOptions().mlflow_uri == shared
    assert SearchOptions(mlflow_uri="http://127.0.0.1:5000").mlflow_uri == "http://127.0.0.1:5000"
    recorded = SearchOptions(out=tmp_path / "r").to_json()
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert SearchOptions.from_json(recorded, out=tmp_path / "r").mlflow_uri == shared
