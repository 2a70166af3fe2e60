"""The driver keeps one pattern: no function in search/ over 100 lines, every command's options
(``--set`` among them) declared once in ``options.ARGUMENTS`` for every command that takes them
and checked by its options object, a registered name as a default written where it is
registered, and ``train`` checked as ``run`` is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from dmlsearch.search.cli import build_parser
from dmlsearch.search.options import ARGUMENTS
from dmlsearch.search.options import TrainOptions
from dmlsearch.trainables.errors import UserError

SEARCH = Path(__file__).resolve().parents[2] / "search"
LONGEST = 100


def _functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [(node.name, (node.end_lineno or node.lineno) - node.lineno + 1)
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_no_function_in_search_is_over_100_lines() -> None:
    long = [f"{path.relative_to(SEARCH.parent)}:{name} ({lines} lines)"
            for path in sorted(SEARCH.rglob("*.py")) for name, lines in _functions(path)
            if lines > LONGEST]
    assert not long, long


def test_set_and_each_option_is_declared_once_for_all_its_commands() -> None:
    sets = [a for a in ARGUMENTS if a.flag == "--set"]
    assert len(sets) == 1
    assert set(sets[0].commands) == {"run", "compare", "record-curves", "train"}
    # every command's arguments come from ARGUMENTS: the parser adds only --verbose itself
    cli = (SEARCH / "cli.py").read_text()
    assert cli.count(".add_argument(") == 1 and '"--verbose"' in cli


def test_the_default_scheduler_is_written_where_it_is_registered() -> None:
    holders = [path.name for path in sorted(SEARCH.rglob("*.py"))
               if any(isinstance(node, ast.Constant) and node.value == "asha"
                      for node in ast.walk(ast.parse(path.read_text())))]
    assert holders == ["schedulers.py"]


@pytest.mark.parametrize(("args", "message"), [
    (["--seeds", "0"], "--seeds must be an integer >= 1 (1: the configuration's seed), got 0"),
    (["--set", "epochs"], "--set expects KEY=VALUE"),
])
def test_train_is_checked_as_run_is(args: list[str], message: str) -> None:
    parsed = build_parser().parse_args(["train", "best_config.yaml", *args])
    with pytest.raises(UserError, match=re.escape(message)):
        TrainOptions.from_args(parsed).check()


@pytest.mark.parametrize(("argv", "message"), [
    (["export", "d", "--top", "0"], "--top must be an integer >= 1, got 0"),
    (["report", "d", "--top", "0"], "--top must be an integer >= 1, got 0"),
    (["importance", "d", "--min-trials", "1"], "--min-trials must be an integer >= 2, got 1"),
    (["importance", "d", "--at-epoch", "0"], "--at-epoch must be an integer >= 1 (epochs over all "
                                             "folds), got 0"),
    (["spaces", "shw"], "action must be one of list, show, got 'shw'"),
])
def test_every_command_s_values_are_checked_by_its_options(argv: list[str], message: str,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    from dmlsearch.search.cli import main

    assert main(argv) == 2
    assert capsys.readouterr().err == f"dmlsearch: error: {message}\n"


def test_train_options_are_the_flags_with_their_defaults() -> None:
    parsed = build_parser().parse_args(["train", "x.yaml", "--set", "epochs=2", "--out", "o"])
    opts = TrainOptions.from_args(parsed)
    opts.check()
    assert opts == TrainOptions(config=Path("x.yaml"), out=Path("o"), sets=(("epochs", 2),))
    assert opts.seeds == 1 and opts.mlflow_uri is None
