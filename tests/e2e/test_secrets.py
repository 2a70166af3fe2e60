"""Nothing exposed: credentials in the environment never reach the results (MLflow's store and
artifacts, Optuna's study, Ray Tune's trial folders and logs, the exports, the report), Ray's own
session logs, or what the commands print (checked on the session's shared search, which runs
with fake credentials); YAML is loaded safely. (No Ray dashboard:
tests/search/tune/test_ray_runtime.py; the MLflow UI on 127.0.0.1:
tests/search/test_tracking.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import REPO as ROOT
from tests.helpers import SharedSearch


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.slow
def test_credentials_in_the_environment_reach_no_file_and_no_output(
        shared_search: SharedSearch) -> None:
    """The session's shared search ran (run, export --top 2, report) with fake credentials in
    its environment and its own Ray temporary folder."""
    out = shared_search.out
    searched = _files(out) + _files(shared_search.ray_tmp)  # Ray's session logs too
    assert {p.name for p in searched} >= {"mlflow.db", "optuna.db", "best_config.yaml",
                                          "summary.json", "search.yaml", "report.md",
                                          "result.json", "params.json", "runtime_env_agent.log"}
    # export --top 2 writes a second file when ASHA let two trials train to their end
    if "only 1 trial(s) trained to their end" not in shared_search.export.stdout:
        assert "best_config-2.yaml" in {p.name for p in searched}
    assert any("ray" in p.parts for p in _files(out))  # Ray Tune's trial folders
    needles = {name: value.encode() for name, value in shared_search.secrets.items()}
    leaks = [f"{name} in {path}" for path in searched for name, needle in needles.items()
             if needle in path.read_bytes()]
    leaks += [f"{name} in the output of command {i}" for i, text in
              enumerate(shared_search.outputs) for name, value in shared_search.secrets.items()
              if value in text]
    assert leaks == []


def test_yaml_is_always_loaded_safely() -> None:
    unsafe = re.compile(r"yaml\.(load|unsafe_load|full_load|load_all|unsafe_load_all)\(|"
                        r"Loader=yaml\.(Loader|UnsafeLoader|FullLoader)")
    found = [f"{path.relative_to(ROOT)}:{n}" for folder in ("search", "trainables", "spaces",
                                                            "benchmarks", "cluster")
             for path in sorted((ROOT / folder).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), start=1)
             if unsafe.search(line)]
    assert found == []
