"""Every validation error of a space file names the file and the right line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dmlsearch.spaces import _loader
from dmlsearch.spaces import load_space
from dmlsearch.trainables.errors import UserError

HEAD = """\
name: demo
source: test
base:
  epochs: 8
"""  # lines 1-4; params start at line 5 in the cases below


def load_error(tmp_path: Path, text: str, name: str = "bad.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    with pytest.raises(UserError) as info:
        load_space(path)
    return str(info.value)


def params(*lines: str, warm: tuple[str, ...] = ()) -> str:
    text = HEAD + "params:\n" + "".join(f"  {line}\n" for line in lines)
    if warm:
        text += "warm_start:\n" + "".join(f"  - {w}\n" for w in warm)
    return text


LR = "lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}"
LOSS = "- loss: {type: categorical, choices: [a, b]}"

CASES = {
    # YAML syntax
    "yaml unclosed flow": ("name: demo\nsource: x\nparams:\n  lr: {type: float, low: 1\n"
                           "other: 3\n", 5, ["not valid YAML"]),
    "yaml bad indent": ("name: demo\nsource: x\nparams:\n  a: {type: int, low: 1, high: 2}\n"
                        " b: 2\n", 5, ["not valid YAML"]),
    "empty file": ("", 1, ["empty"]),
    "not a mapping": ("- a\n- b\n", 1, ["expected a mapping"]),
    # top level
    "missing source": ("name: demo\nparams:\n  " + LR + "\n", 1, ["'source'"]),
    "missing params": ("name: demo\nsource: x\n", 1, ["'params'"]),
    "missing name": ("source: x\nparams:\n  " + LR + "\n", 1, ["'name'"]),
    "empty source": ("name: demo\nsource: ''\nparams:\n  " + LR + "\n", 2, ["source", "text"]),
    "unknown top field": (HEAD + "parms: {}\n", 5, ["unknown field 'parms'", "warm_start"]),
    "base value list": ("name: demo\nsource: x\nbase:\n  a: 1\n  b: [1, 2]\nparams:\n  "
                        + LR + "\n", 5, ["base: b", "single value", "a list"]),
    "base key with slash": ("name: demo\nsource: x\nbase:\n  a/b: 1\nparams:\n  " + LR + "\n",
                            4, ["'/'"]),
    "params empty": (HEAD + "params: {}\n", 5, ["at least one"]),
    "params scalar": (HEAD + "params: 3\n", 5, ["expected a mapping"]),
    # param fields and types
    "unknown param field": (params(LR, "wd: {type: float, lo: 0.0, high: 1.0}"), 7,
                            ["unknown field 'lo'", "type, low, high, step, log, choices, when"]),
    "field of another type": (params(LR, "wd: {type: float, low: 0.0, high: 1.0, choices: [1]}"),
                              7, ["'choices' does not apply", "low, high, step, log"]),
    "missing type": (params(LR, "wd: {low: 0.0, high: 1.0}"), 7, ["'type'"]),
    "bad type": (params(LR, "wd: {type: number, low: 0.0, high: 1.0}"), 7,
                 ["float, int, categorical", "'number'"]),
    "spec not a mapping": (params(LR, "wd: 0.1"), 7, ["expected a mapping"]),
    "low not a number": (params(LR, "wd: {type: float, low: abc, high: 1.0}"), 7,
                         ["low: expected a number", "'abc'"]),
    "int low float": (params("bs:", "  type: int", "  low: 32.5", "  high: 64"), 8,
                      ["expected an integer", "32.5"]),
    "missing high": (params(LR, "wd: {type: float, low: 0.0}"), 7, ["'high'"]),
    "bounds reversed": (params(LR, "wd:", "  type: float", "  low: 2.0", "  high: 1.0"), 9,
                        ["wrong way round"]),
    "bounds equal": (params(LR, "wd: {type: float, low: 1.0, high: 1.0}"), 7, ["low equals high"]),
    "step larger than range": (params(LR, "wd:", "  type: float", "  low: 0.0", "  high: 1.0",
                                      "  step: 2.0"), 11, ["larger than the range"]),
    "step not dividing": (params(LR, "bs: {type: int, low: 32, high: 100, step: 16}"), 7,
                          ["whole number of steps", "96"]),
    "float step not dividing": (params("m: {type: float, low: 0.0, high: 1.0, step: 0.3}"), 6,
                                ["0.9"]),
    "step zero": (params(LR, "bs: {type: int, low: 1, high: 4, step: 0}"), 7, ["> 0"]),
    "log low zero": (params(LR, "wd:", "  type: float", "  low: 0.0", "  high: 1.0",
                            "  log: true"), 9, ["log scale needs low > 0"]),
    "int log low zero": (params("n: {type: int, low: 0, high: 4, log: true}"), 6, ["low >"]),
    "log with step": (params(LR, "wd:", "  type: float", "  low: 0.1", "  high: 1.0",
                             "  log: true", "  step: 0.1"), 12, ["Optuna forbids"]),
    "log not bool": (params("wd: {type: float, low: 0.1, high: 1.0, log: maybe}"), 6,
                     ["true or false"]),
    "empty choices": (params(LR, "opt: {type: categorical, choices: []}"), 7,
                      ["at least one choice"]),
    "choices not a list": (params(LR, "opt: {type: categorical, choices: adam}"), 7,
                           ["expected a list"]),
    "missing choices": (params(LR, "opt: {type: categorical}"), 7, ["'choices'"]),
    "duplicate choices": (params(LR, "opt:", "  type: categorical", "  choices:", "  - 1",
                                 "  - 1.0"), 11, ["listed twice"]),
    "nested choice": (params(LR, "opt: {type: categorical, choices: [[1, 2]]}"), 7,
                      ["single value"]),
    # keys and repeats
    "param also in base": (params(LR, "epochs: {type: int, low: 1, high: 9}"), 7,
                           ["both fixed in base"]),
    "duplicate mapping key": (params(LR, "wd: {type: float, low: 0.1, high: 1.0}",
                                     "wd: {type: float, low: 0.1, high: 2.0}"), 8,
                              ["appears twice", "line 7", "list"]),
    "overlapping repeats": (params(LOSS, "- m: {type: float, low: 0.0, high: 1.0, when: "
                                   "{loss: [a, b]}}",
                                   "- m: {type: float, low: 0.0, high: 2.0, when: {loss: b}}"),
                            8, ["can hold together", "line 7"]),
    "unconditional repeat": (params(LOSS, "- m: {type: float, low: 0.0, high: 1.0}",
                                    "- m: {type: float, low: 0.0, high: 2.0, when: {loss: b}}"),
                             8, ["can hold together"]),
    "bad list item": (params(LOSS, "- {type: float, low: 0.0, high: 1.0}"), 7,
                      ["name: key"]),
    "bracket key": (params(LOSS, "- {name: 'm[a]', type: float, low: 0.0, high: 1.0}"), 7,
                    ["not a valid config key"]),
    # conditions
    "when unknown key": (params(LOSS, "- m: {type: float, low: 0.0, high: 1.0, "
                                "when: {los: a}}"), 7, ["unknown key 'los'", "loss"]),
    "when later key": (params("- m: {type: float, low: 0.0, high: 1.0, when: {loss: a}}",
                              LOSS), 6, ["declared at or after", "move loss above m"]),
    "when own key": (params("- n: {type: int, low: 1, high: 3, when: {n: 1}}"), 6,
                     ["depends on itself"]),
    "when value outside choices": (params(LOSS, "- m:", "    type: float", "    low: 0.0",
                                          "    high: 1.0", "    when:",
                                          "      loss: [a, c]"), 12, ["loss = c", "{a, b}"]),
    "when on float": (params("- x: {type: float, low: 0.0, high: 1.0}",
                             "- y: {type: int, low: 1, high: 3, when: {x: 0.5}}"), 7,
                      ["float param"]),
    "when empty list": (params(LOSS, "- m: {type: int, low: 1, high: 3, when: {loss: []}}"), 7,
                        ["non-empty list"]),
    # warm starts
    "warm out of range": (params(LR, warm=("{lr: 0.5}",)), 8, ["can take",
                                                               "[0.0001, 0.01]"]),
    "warm off grid": (params("m: {type: float, low: 0.0, high: 1.0, step: 0.1}",
                             warm=("{m: 0.5}", "{m: 0.55}")), 9, ["step 0.1"]),
    "warm bad choice": (params(LOSS, warm=("{loss: c}",)), 8, ["can take", "{a, b}"]),
    "warm unknown key": (params(LR, warm=("{lr: 1.0e-3}", "{learning_rate: 1.0e-3}")), 9,
                         ["unknown key 'learning_rate'", "lr"]),
    "warm contradicts base": (params(LR, warm=("{epochs: 3}",)), 8, ["contradicts base"]),
    "warm inactive param": (params(LOSS, "- m: {type: float, low: 0.0, high: 1.0, "
                                   "when: {loss: a}}", warm=("{loss: b, m: 0.5}",)), 9,
                            ["not searched at this point"]),
    "warm not a list": (params(LR) + "warm_start: {lr: 1.0e-3}\n", 7, ["list of points"]),
    "warm int for int": (params("n: {type: int, low: 1, high: 9}", warm=("{n: 2.5}",)), 8,
                         ["can take"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_error_names_file_and_line(tmp_path: Path, case: str) -> None:
    text, line, fragments = CASES[case]
    message = load_error(tmp_path, text)
    assert f"bad.yaml:{line}:" in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_messages_say_expected_and_fix(tmp_path: Path) -> None:
    message = load_error(tmp_path, params(LR, "wd: {type: float, low: 2.0, high: 1.0}"))
    assert "expected" in message and "swap" in message


def test_valid_head_loads(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(params(LR, warm=("{lr: 1.0e-3, epochs: 8}",)))
    space = load_space(path)
    assert space.warm_starts() == [{"lr": 1e-3}]


def test_shipped_name_must_equal_stem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_loader, "SHIPPED_DIR", tmp_path.resolve())
    message = load_error(tmp_path, params(LR), name="other.yaml")
    assert "other.yaml:1:" in message and "name: other" in message
    (tmp_path / "demo.yaml").write_text(params(LR))
    assert load_space("demo").name == "demo"
    assert _loader.space_names() == ["demo", "other"]
