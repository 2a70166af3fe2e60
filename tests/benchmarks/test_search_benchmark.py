"""Issue 36's benchmark JSON (``benchmarks/search_benchmark.py``): the committed file has the
issue's schema and is exactly what the script makes of the committed runs it names; runs that
do not fit together are refused with one line saying what was expected, and nothing is
written."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.search_benchmark import MIN_SEEDS
from benchmarks.search_benchmark import Mismatch
from benchmarks.search_benchmark import compose
from benchmarks.search_benchmark import main
from benchmarks.search_efficiency import DEFAULT_METHOD
from tests.helpers import REPO

COMMITTED = REPO / "benchmarks" / "results" / "search_benchmark_virtual_cpu_2026-11-29.json"


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    return json.loads(COMMITTED.read_text())


def test_the_committed_json_has_the_issues_schema(committed: dict[str, Any]) -> None:
    assert committed["default_method"] == DEFAULT_METHOD
    assert committed["clock"] == "virtual"
    assert committed["seeds"] >= MIN_SEEDS and committed["transfer_seeds"] >= MIN_SEEDS
    tables = committed["tables"]
    assert committed["held_out_table"] in tables
    assert set(committed["not_in_choice"]) < set(tables)
    for table in tables.values():
        assert DEFAULT_METHOD in table["methods"] and "random" in table["methods"]
    misleading = [p for p in committed["transfer"].values() if p["misleading"]]
    matched = [p for p in committed["transfer"].values() if not p["misleading"]]
    assert misleading and matched
    for pair in committed["transfer"].values():
        assert {pair["source"], pair["target"]} <= {*tables, "omniglot-ms-mirrored"}
        names = set(pair["methods"])
        assert {"random+asha", DEFAULT_METHOD} <= names and any("transfer" in n for n in names)
        for measures in pair["methods"].values():
            for fraction in ("0.25", "1.0"):
                cell = measures["regret_at"][fraction]
                assert cell["low"] <= cell["mean"] <= cell["high"]


def test_the_committed_json_is_what_its_runs_give(committed: dict[str, Any]) -> None:
    sources = committed["sources"]
    paths = {"within": [s["file"] for s in sources["within"]], "choice": sources["choice"]["file"],
             "transfer": [s["file"] for s in sources["transfer"]]}
    within = [json.loads((REPO / path).read_text()) for path in paths["within"]]
    choice = json.loads((REPO / paths["choice"]).read_text())
    transfer = [json.loads((REPO / path).read_text()) for path in paths["transfer"]]
    again = compose(within, choice, transfer, paths=paths)
    assert json.loads(json.dumps(again, default=str)) == committed


def _runs() -> dict[str, dict[str, Any]]:
    regret = {"0.25": {"mean": 0.1, "low": 0.05, "high": 0.15},
              "1.0": {"mean": 0.02, "low": 0.01, "high": 0.03}}
    table = {"methods": {DEFAULT_METHOD: {"regret_at": regret}, "random": {"regret_at": regret}}}
    common = {"clock": "virtual", "seeds": MIN_SEEDS, "default_method": DEFAULT_METHOD,
              "budget_trials": 20, "concurrency": 4, "noise": True}
    pair = {"source": "a", "target": "b", "misleading": False,
            "methods": {m: {"regret_at": regret}
                        for m in ("random+asha", DEFAULT_METHOD, f"{DEFAULT_METHOD}+transfer")}}
    return {
        "within": [{**common, "tables": {"a": table, "b": table, "c": table, "d": table}}],
        "choice": {**common, "held_out_table": "b",
                   "default_choice": {"development_tables": ["a", "c"]}},
        "transfer": [{**common, "transfer_method": f"{DEFAULT_METHOD}+transfer",
                      "transfer": {"a->b": pair}}],
    }


def _compose(runs: dict[str, Any]) -> dict[str, Any]:
    return compose(runs["within"], runs["choice"], runs["transfer"],
                   paths={"within": [f"w{i}" for i in range(len(runs["within"]))], "choice": "c",
                          "transfer": [f"t{i}" for i in range(len(runs["transfer"]))]})


def test_compose_names_the_held_out_table_and_the_tables_no_choice_saw() -> None:
    body = _compose(_runs())
    assert body["held_out_table"] == "b" and body["not_in_choice"] == ["d"]
    assert [s["file"] for s in body["sources"]["transfer"]] == ["t0"]
    assert body["transfer_seeds"] == MIN_SEEDS and list(body["transfer"]) == ["a->b"]


def test_later_runs_of_new_tables_and_pairs_join_the_first() -> None:
    runs = _runs()
    later_table = {**runs["within"][0], "tables": {"e": runs["within"][0]["tables"]["a"]}}
    later_pair = {**runs["transfer"][0], "transfer": {"e->a": runs["transfer"][0]["transfer"]
                                                      ["a->b"]}}
    body = _compose({**runs, "within": [*runs["within"], later_table],
                     "transfer": [*runs["transfer"], later_pair]})
    assert list(body["tables"]) == ["a", "b", "c", "d", "e"]
    assert body["not_in_choice"] == ["d", "e"]
    assert list(body["transfer"]) == ["a->b", "e->a"]
    assert [s["file"] for s in body["sources"]["within"]] == ["w0", "w1"]
    with pytest.raises(Mismatch, match="table a is in both w0 and w1; give each table once"):
        _compose({**runs, "within": [*runs["within"], runs["within"][0]]})
    with pytest.raises(Mismatch, match="the runs must share 'budget_trials'"):
        _compose({**runs, "within": [*runs["within"], {**later_table, "budget_trials": 40}]})


def _broken(what: str) -> dict[str, dict[str, Any]]:
    runs = copy.deepcopy(_runs())
    if what == "ray clock":
        runs["within"][0]["clock"] = "ray"
    elif what == "few seeds":
        runs["transfer"][0]["seeds"] = MIN_SEEDS - 1
    elif what == "another default":
        for run in [*runs["within"], runs["choice"], *runs["transfer"]]:
            run["default_method"] = "random+asha"
    elif what == "defaults disagree":
        runs["choice"]["default_method"] = "prior-tpe+asha"
    elif what == "nothing held out":
        runs["choice"]["held_out_table"] = None
    elif what == "no transfer method":
        del runs["transfer"][0]["transfer"]["a->b"]["methods"][f"{DEFAULT_METHOD}+transfer"]
    elif what == "no interval":
        del runs["transfer"][0]["transfer"]["a->b"]["methods"]["random+asha"]["regret_at"]["1.0"]
    return runs


@pytest.mark.parametrize(("what", "says"), [
    ("ray clock", "must be replayed on the virtual clock, got clock 'ray'"),
    ("few seeds", f"must have at least {MIN_SEEDS} seeds, got {MIN_SEEDS - 1}"),
    ("another default", "but the product's is"),
    ("defaults disagree", "the runs must share 'default_method'"),
    ("nothing held out", "must hold out a table the within-task run replays"),
    ("no transfer method", "missing a method named for transfer"),
    ("no interval", "expected regret_at 1.0 with mean, low and high"),
])
def test_runs_that_do_not_fit_are_refused_and_nothing_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str, says: str) -> None:
    args = []
    for role, run in _broken(what).items():
        files = []
        for i, one in enumerate(run if isinstance(run, list) else [run]):
            files.append(tmp_path / f"{role}{i}.json")
            files[-1].write_text(json.dumps(one))
        args += [f"--{role}", *map(str, files)]
    out = tmp_path / "out.json"
    with pytest.raises(SystemExit) as exited:
        main([*args, "--out", str(out)])
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert says in error and "; " in error, error  # what arrived, then how to fix it
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


def test_a_missing_run_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--within", str(tmp_path / "no.json"), "--choice", "x", "--transfer", "y",
              "--out", str(tmp_path / "out.json")])
    assert exited.value.code == 2
    assert f"--within: no file at {tmp_path / 'no.json'}" in capsys.readouterr().err
