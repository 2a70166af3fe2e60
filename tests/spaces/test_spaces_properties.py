"""Property test: random valid space files load, sample in bounds and replay their warm starts."""

from __future__ import annotations

import string
from decimal import Decimal
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from dmlsearch.spaces import config_from_sample
from dmlsearch.spaces import load_space
from dmlsearch.spaces._params import same_value

optuna.logging.set_verbosity(optuna.logging.WARNING)

SWITCH = ["a", "b", "c"]


@st.composite
def float_spec(draw: st.DrawFn) -> dict[str, Any]:
    mode = draw(st.sampled_from(["plain", "step", "log"]))
    if mode == "step":  # decimal grid: low + n * step exactly
        unit = Decimal(10) ** -draw(st.integers(0, 4))
        low = draw(st.integers(-1000, 1000)) * unit
        step = draw(st.integers(1, 500)) * unit
        high = low + draw(st.integers(1, 40)) * step
        return {"type": "float", "low": float(low), "high": float(high), "step": float(step)}
    if mode == "log":
        low = draw(st.floats(1e-6, 1e3))
        return {"type": "float", "low": low, "high": low * draw(st.floats(1.5, 1e4)),
                "log": True}
    low = draw(st.floats(-1e6, 1e6))
    high = low + draw(st.floats(1e-3, 1e6))
    return {"type": "float", "low": low, "high": high}


@st.composite
def int_spec(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        low = draw(st.integers(1, 1000))
        return {"type": "int", "low": low, "high": low + draw(st.integers(1, 10**6)), "log": True}
    low, step = draw(st.integers(-1000, 1000)), draw(st.integers(1, 20))
    spec = {"type": "int", "low": low, "high": low + step * draw(st.integers(1, 50))}
    if step > 1 or draw(st.booleans()):
        spec["step"] = step
    return spec


_choice = st.one_of(
    st.integers(-100, 100),
    st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False),
    st.text(string.ascii_letters + "_", min_size=1, max_size=8),
    st.booleans(),
    st.none(),
)
categorical_spec = st.builds(
    lambda choices: {"type": "categorical", "choices": choices},
    st.lists(_choice, min_size=1, max_size=6, unique=True),  # unique by ==: 1, 1.0, True are one
)
any_spec = st.one_of(float_spec(), int_spec(), categorical_spec)


@st.composite
def space_doc(draw: st.DrawFn) -> dict[str, Any]:
    params: list[dict[str, Any]] = [{"name": "switch", "type": "categorical", "choices": SWITCH}]
    for i in range(draw(st.integers(1, 5))):
        spec = {"name": f"p{i}.x", **draw(any_spec)}
        if draw(st.booleans()):
            spec["when"] = {"switch": draw(st.lists(st.sampled_from(SWITCH), min_size=1,
                                                    max_size=3, unique=True))}
        params.append(spec)
    if draw(st.booleans()):  # one key searched in two exclusive branches
        params.append({"name": "r", **draw(any_spec), "when": {"switch": "a"}})
        params.append({"name": "r", **draw(any_spec), "when": {"switch": ["b", "c"]}})
    doc = {"name": "random", "source": "hypothesis", "base": {"epochs": 2}, "params": params}
    return doc


def default_point(doc: dict[str, Any], switch: str) -> dict[str, Any]:
    """A warm start: the switch value and, for every param active under it, its low/first."""
    point: dict[str, Any] = {"switch": switch}
    for spec in doc["params"][1:]:
        when = spec.get("when", {}).get("switch", SWITCH)
        if switch in (when if isinstance(when, list) else [when]):
            point[spec["name"]] = spec["choices"][-1] if "choices" in spec else spec["low"]
    return point


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("random_spaces")


@settings(max_examples=60, deadline=None)
@given(doc=space_doc(), switch=st.sampled_from(SWITCH), seed=st.integers(0, 2**31 - 1))
def test_random_valid_spaces_load_and_sample(
    folder: Path, doc: dict[str, Any], switch: str, seed: int
) -> None:
    point = default_point(doc, switch)
    path = folder / "random.yaml"
    path.write_text(yaml.safe_dump({**doc, "warm_start": [point]}, sort_keys=False))
    space = load_space(path)
    assert len(space.params) == len(doc["params"])

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for warm in space.warm_starts():
        study.enqueue_trial(warm)
    for i in range(6):
        trial = study.ask()
        sampled = space.define_by_run(trial)
        config = config_from_sample(sampled)
        assert config["epochs"] == 2
        if i == 0:  # the warm start comes back exactly
            assert set(config) == set(point) | {"epochs"}
            for key, value in point.items():
                assert same_value(config[key], value) or config[key] == value, key
        for p in space.params:
            active = p.is_active(config)
            assert (p.optuna_name in sampled) == active
            if active:
                value = sampled[p.optuna_name]
                assert p.contains(value), (p, value)
                if p.kind == "float":
                    assert type(value) is float
                if p.kind == "int":
                    assert type(value) is int
        study.tell(trial, 0.0)

    fixed = space.with_overrides({"switch": switch})
    assert {p.key for p in fixed.params} == set(point) - {"switch"}
    assert all(p.when == () for p in fixed.params)
    expected = {k: v for k, v in point.items() if k != "switch"}
    assert [config_from_sample(w) for w in fixed.warm_starts()] == ([expected] if expected else [])
