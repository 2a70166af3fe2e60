"""The one reader and checker of values (``trainables.values``): trial settings and search
options read the same text alike and say what was expected in the same words."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dmlsearch.search.options import SearchOptions
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.values import Rule
from dmlsearch.trainables.values import check_value
from dmlsearch.trainables.values import rule_for_hint


@pytest.mark.parametrize(("text", "meant"), [("yes", True), ("on", True), ("1", True),
                                              ("true", True), ("no", False), ("off", False),
                                              ("0", False), ("False", False)])
def test_a_boolean_word_means_the_same_to_a_setting_and_to_an_option(text: str,
                                                                     meant: bool) -> None:
    """They disagreed: a trial setting read yes/on, a search option (a results folder's
    search.yaml read back by resume) refused them."""
    assert TrialConfig.from_flat({"compile": text}).compile is meant
    body = {**SearchOptions().to_json(), "retrain": text}
    options = SearchOptions.from_json(body, out=Path("x"))
    options.check()
    assert options.retrain is meant


@pytest.mark.parametrize(("field", "setting", "value", "expected"), [
    ("concurrency", "epochs", "two", "an integer"),
    ("cpus_per_trial", "lr", "fast", "a number"),
    ("retrain", "nesterov", "perhaps", "true or false"),
    ("seed", "seed", 1.5, "an integer"),
])
def test_a_wrong_type_is_said_alike_for_settings_and_options(field: str, setting: str,
                                                             value: Any, expected: str) -> None:
    with pytest.raises(UserError, match=f"^{setting} must be {expected}, got ") as as_setting:
        TrialConfig.from_flat({setting: value})
    body = {**SearchOptions().to_json(), field: value}
    with pytest.raises(UserError, match=f" must be {expected}, got ") as as_option:
        SearchOptions.from_json(body, out=Path("x")).check()
    assert str(as_setting.value).split(" must be ")[1].split(", got")[0] == \
        str(as_option.value).split(" must be ")[1].split(", got")[0]


def test_options_are_read_as_their_type_once_checked() -> None:
    options = dataclasses.replace(SearchOptions(), concurrency="3", cpus_per_trial=2)
    options.check()
    assert options.concurrency == 3 and options.cpus_per_trial == 2.0
    assert isinstance(options.cpus_per_trial, float)


@pytest.mark.parametrize(("rule", "value", "message"), [
    (Rule("int", low=1), 0, "x must be an integer >= 1, got 0; fix"),
    (Rule("float", low=0, low_open=True), -2.5, "x must be a number > 0, got -2.5; fix"),
    (Rule("float", low=0, low_open=True, high=1, high_open=True), 1.0,
     "x must be a number strictly between 0 and 1, got 1; fix"),
    (Rule("int", low=1, high=256, what="30: the source's"), 300,
     "x must be an integer in 1..256 (30: the source's), got 300; fix"),
    (Rule("str", choices=("a", "b")), "c", "x must be one of a, b, got 'c'; fix"),
    (Rule("str", choices=("auto", "off"), paths="folder"), "autoo",
     "x must be auto, off or a folder, got 'autoo', which is none of auto, off and not "
     "written as a path"),
    (Rule("float"), float("inf"), "x must be a finite number, got inf; fix"),
    (Rule("int"), None, "x must be an integer, got an empty value; fix"),
])
def test_every_mistake_is_one_line_saying_what_was_expected(rule: Rule, value: Any,
                                                            message: str) -> None:
    with pytest.raises(UserError) as caught:
        check_value(rule, value, name="x", fix="fix")
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("rule", "value", "read"), [
    (Rule("int"), "3", 3), (Rule("int"), 4.0, 4), (Rule("float"), "1e-3", 1e-3),
    (Rule("str", optional=True, none_words=True), "none", None),
    (Rule("str", optional=True), "none", "none"), (Rule("str"), 5, "5"),
    (Rule("str", choices=("auto",), paths="folder"), "./cache", "./cache"),
    (Rule("str", choices=("none",), paths="file"), "weights.pth", "weights.pth"),
    (Rule("path"), "a/b", Path("a/b")), (Rule("list"), ["a"], ("a",)),
    (Rule("pairs"), {"epochs": 3}, (("epochs", 3),)),
])
def test_text_and_python_values_are_read_as_the_rule_s_type(rule: Rule, value: Any,
                                                            read: Any) -> None:
    assert check_value(rule, value, name="x") == read


def test_a_rule_follows_a_fields_annotation() -> None:
    assert rule_for_hint(int | None) == Rule("int", optional=True)
    assert rule_for_hint(tuple[tuple[str, Any], ...]).type == "pairs"
    assert rule_for_hint(tuple[str, ...]).type == "list"
    assert rule_for_hint(Path | None) == Rule("path", optional=True)
