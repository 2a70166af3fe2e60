"""The Space API on real Optuna studies: sampling, conditions, warm starts, overrides."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import optuna
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from dmlsearch.spaces import Param
from dmlsearch.spaces import Space
from dmlsearch.spaces import config_from_sample
from dmlsearch.spaces import load_space
from dmlsearch.spaces import space_names
from dmlsearch.trainables.errors import UserError

optuna.logging.set_verbosity(optuna.logging.WARNING)


# -- helpers --------------------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "demo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def on_grid(p: Param, value: Any) -> bool:
    """Exactly on the decimal grid (0.30000000000000004 is not)."""
    if p.step is None:
        return True
    return (Decimal(repr(value)) - Decimal(repr(p.low))) % Decimal(repr(p.step)) == 0


def check_config(space: Space, sampled: dict[str, Any]) -> dict[str, Any]:
    """Every sampled value in its domain, with its Python type; conditions honoured."""
    config = config_from_sample(sampled)
    for key, value in space.base.items():
        assert config[key] == value
    values: dict[str, Any] = {}
    for p in space.params:
        if p.is_active(values):
            assert p.optuna_name in sampled, p
            value = sampled[p.optuna_name]
            assert p.contains(value), (p, value)
            assert on_grid(p, value), (p, value)
            if p.kind == "int":
                assert type(value) is int
            elif p.kind == "float":
                assert type(value) is float
            values[p.key] = value
        else:
            assert p.optuna_name not in sampled, p
    assert set(config) == set(space.base) | set(values)
    assert all("[" not in k for k in config)
    return config


def run_study(space: Space, sampler: optuna.samplers.BaseSampler, n: int) -> list[dict]:
    study = optuna.create_study(sampler=sampler, direction="maximize")
    configs = []
    for i in range(n):
        trial = study.ask()
        sampled = space.define_by_run(trial)
        configs.append(check_config(space, sampled))
        study.tell(trial, float(i % 3))
    return configs


# -- shipped spaces -------------------------------------------------------------------------------


def test_shipped_spaces_load_and_describe() -> None:
    names = space_names()
    assert "quickstart" in names
    for name in names:
        space = load_space(name)
        assert space.name == name
        assert space.path is not None and space.path.stem == name
        assert space.source.strip()
        assert space.params
        text = space.describe()
        assert name in text and space.source in text
        for p in space.params:
            assert p.key in text
        assert space.keys() == set(space.base) | {p.key for p in space.params}
        run_study(space, optuna.samplers.RandomSampler(seed=0), 10)


def test_load_space_by_path_and_unknown_name(tmp_path: Path) -> None:
    shipped = load_space("quickstart")
    assert shipped.path is not None
    assert load_space(shipped.path).params == shipped.params
    assert load_space(str(shipped.path)).base == shipped.base
    with pytest.raises(UserError, match="quickstart"):
        load_space("no_such_space")
    with pytest.raises(UserError, match="does not exist"):
        load_space(tmp_path / "missing.yaml")


def test_quickstart_contents() -> None:
    space = load_space("quickstart")
    assert space.base["dataset"] == "glyphs" and space.base["backbone"] == "smallcnn"
    assert space.base["epochs"] == 8 and space.base["weight_decay"] == 1e-4
    names = [p.optuna_name for p in space.params]
    assert names == [
        "loss", "lr", "embedding_size", "loss.margin[multi_similarity]",
        "loss.alpha[multi_similarity]", "loss.beta", "loss.epsilon",
        "loss.margin[proxy_anchor]", "loss.alpha[proxy_anchor]",
    ]
    lr = space.params[1]
    assert (lr.kind, lr.low, lr.high, lr.log) == ("float", 3e-4, 1e-2, True)
    assert space.warm_starts() == [
        {"loss": "multi_similarity", "lr": 1e-3, "embedding_size": 64,
         "loss.margin[multi_similarity]": 0.5, "loss.alpha[multi_similarity]": 2.0,
         "loss.beta": 50.0, "loss.epsilon": 0.1},
        {"loss": "proxy_anchor", "lr": 1e-3, "embedding_size": 64,
         "loss.margin[proxy_anchor]": 0.1, "loss.alpha[proxy_anchor]": 32.0},
    ]
    default = space.default_config()
    assert default == {**space.base, "loss": "multi_similarity", "lr": 1e-3,
                       "embedding_size": 64, "loss.margin": 0.5, "loss.alpha": 2.0,
                       "loss.beta": 50.0, "loss.epsilon": 0.1}


# -- sampling -------------------------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_quickstart_samples_in_domain_random(seed: int) -> None:
    configs = run_study(load_space("quickstart"), optuna.samplers.RandomSampler(seed=seed), 20)
    for config in configs:
        ms = config["loss"] == "multi_similarity"
        assert ("loss.beta" in config) == ms and ("loss.epsilon" in config) == ms
        assert "loss.margin" in config and "loss.alpha" in config


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_quickstart_samples_in_domain_tpe(seed: int) -> None:
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
    run_study(load_space("quickstart"), sampler, 12)


def test_define_by_run_returns_constants_and_clean_values() -> None:
    space = load_space("quickstart")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(60):
        trial = study.ask()
        out = space.define_by_run(trial)
        for key, value in space.base.items():
            assert out[key] == value
        for name, value in trial.params.items():  # what Optuna recorded, raw
            assert out[name] == pytest.approx(value, abs=1e-12)
        seen.update(v for k, v in out.items() if k.startswith("loss.margin"))
        study.tell(trial, 0.0)
    assert seen <= {round(0.1 * i, 1) for i in range(11)}
    assert 0.30000000000000004 not in seen


def test_config_from_sample_is_pure() -> None:
    assert config_from_sample({"loss.margin[proxy_anchor]": 0.1, "lr": 1e-3, "a.b": 1}) == {
        "loss.margin": 0.1, "lr": 1e-3, "a.b": 1}
    assert config_from_sample({"x[a,b|c]": 2}) == {"x": 2}
    with pytest.raises(ValueError, match="twice"):
        config_from_sample({"x[a]": 1, "x[b]": 2})


# -- warm starts ----------------------------------------------------------------------------------


def test_enqueued_warm_starts_come_back_exactly() -> None:
    space = load_space("quickstart")
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    points = space.warm_starts()
    for point in points:
        study.enqueue_trial(point)
    for point in points:
        trial = study.ask()
        sampled = space.define_by_run(trial)
        assert {k: sampled[k] for k in point} == point
        assert set(sampled) - set(space.base) == set(point)
        study.tell(trial, 1.0)


def test_warm_start_leaving_a_branch_open_feeds_every_branch(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        name: demo
        source: test
        params:
          - loss: {type: categorical, choices: [a, b]}
          - m: {type: float, low: 0.0, high: 1.0, when: {loss: a}}
          - m: {type: float, low: 0.0, high: 2.0, when: {loss: b}}
          - {name: n, type: int, low: 1, high: 9, when: {loss: a}}
        warm_start:
          - {m: 0.5}
          - {loss: b, m: 1.5}
        """)
    space = load_space(path)
    assert space.warm_starts() == [{"m[a]": 0.5, "m[b]": 0.5}, {"loss": "b", "m[b]": 1.5}]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for point in space.warm_starts():
        study.enqueue_trial(point)
    first = config_from_sample(space.define_by_run(study.ask()))
    assert first["m"] == 0.5
    assert config_from_sample(space.define_by_run(study.ask())) == {"loss": "b", "m": 1.5}


# -- overrides ------------------------------------------------------------------------------------


def test_override_of_a_branching_param() -> None:
    space = load_space("quickstart").with_overrides({"epochs": 3, "loss": "proxy_anchor"})
    assert space.base["epochs"] == 3 and space.base["loss"] == "proxy_anchor"
    assert [p.key for p in space.params] == ["lr", "embedding_size", "loss.margin", "loss.alpha"]
    assert all(p.when == () for p in space.params)
    margin = space.params[2]
    assert (margin.low, margin.high, margin.optuna_name) == (
        0.0, 1.0, "loss.margin[proxy_anchor]")
    assert space.warm_starts() == [{"lr": 1e-3, "embedding_size": 64,
                                    "loss.margin[proxy_anchor]": 0.1,
                                    "loss.alpha[proxy_anchor]": 32.0}]
    assert space.default_config()["loss"] == "proxy_anchor"
    assert "loss.beta" not in space.keys()
    for config in run_study(space, optuna.samplers.RandomSampler(seed=1), 10):
        assert config["loss"] == "proxy_anchor" and config["epochs"] == 3
        assert "loss.beta" not in config


def test_override_of_a_plain_param_and_new_key() -> None:
    base = load_space("quickstart")
    space = base.with_overrides({"lr": 5e-3, "seed": 7})
    assert "lr" not in [p.key for p in space.params]
    assert space.base["lr"] == 5e-3 and space.base["seed"] == 7
    # lr selects no branch: the points keep their loss defaults, without lr.
    kept = space.warm_starts()
    assert len(kept) == 2 and all("lr" not in point for point in kept)
    assert {point["loss"] for point in kept} == {"multi_similarity", "proxy_anchor"}
    agreeing = base.with_overrides({"lr": 1e-3}).warm_starts()
    assert len(agreeing) == 2 and all("lr" not in point for point in agreeing)
    config = run_study(space, optuna.samplers.RandomSampler(seed=2), 1)[0]
    assert config["lr"] == 5e-3 and config["seed"] == 7
    assert base.base.get("lr") is None  # the original is untouched


def test_override_contradicting_warm_starts_and_outside_choices() -> None:
    space = load_space("quickstart")
    for size in (128, 64):  # not a branch selector: the key leaves the points, the points stay
        kept = space.with_overrides({"embedding_size": size}).warm_starts()
        assert len(kept) == 2 and all("embedding_size" not in p for p in kept)
    other = space.with_overrides({"loss": "contrastive"})
    assert [p.key for p in other.params] == ["lr", "embedding_size"]
    assert other.warm_starts() == []
    assert other.default_config()["loss"] == "contrastive"


def test_overrides_chain_from_the_declared_space() -> None:
    space = load_space("quickstart")
    back = space.with_overrides({"loss": "proxy_anchor"}).with_overrides(
        {"loss": "multi_similarity"})
    assert back.base["loss"] == "multi_similarity"
    assert [p.key for p in back.params] == [
        "lr", "embedding_size", "loss.margin", "loss.alpha", "loss.beta", "loss.epsilon"]
    assert len(back.warm_starts()) == 1
    with pytest.raises(UserError, match="config key"):
        space.with_overrides({"loss.margin[proxy_anchor]": 0.2})


def test_conditions_on_base_keys_and_int_params(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        name: demo
        source: test
        base: {backbone: resnet50}
        params:
          - layers: {type: int, low: 1, high: 4}
          - size: {type: int, low: 64, high: 512, log: true, when: {layers: [3, 4]}}
          - crop: {type: categorical, choices: [random, center], when: {backbone: resnet50}}
          - pool: {type: categorical, choices: [gap, gmp], when: {backbone: bninception}}
        """)
    space = load_space(path)
    assert [p.key for p in space.params] == ["layers", "size", "crop"]
    assert space.params[2].when == ()
    assert [p.key for p in space.with_overrides({"backbone": "bninception"}).params] == [
        "layers", "size", "pool"]
    assert [p.key for p in space.with_overrides({"layers": 2}).params] == ["crop"]
    assert [p.key for p in space.with_overrides({"layers": 3}).params] == ["size", "crop"]
    for config in run_study(space, optuna.samplers.RandomSampler(seed=5), 30):
        assert ("size" in config) == (config["layers"] >= 3)


def test_list_form_with_name_field_and_exponent_floats(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        name: anything
        source: test
        params:
          - {name: lr, type: float, low: 1e-5, high: 1E-2, log: true}
          - {name: wd, type: categorical, choices: [0, 1e-4]}
        """)
    space = load_space(path)
    assert (space.params[0].low, space.params[0].high) == (1e-5, 1e-2)
    assert space.params[1].choices == (0, 1e-4)


def test_decimal_steps_are_exact(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        name: demo
        source: test
        params:
          x: {type: float, low: 0.1, high: 0.3, step: 0.2}
          y: {type: float, low: 0.0, high: 0.3, step: 0.1}
        """)
    space = load_space(path)
    configs = run_study(space, optuna.samplers.RandomSampler(seed=0), 40)
    assert {c["x"] for c in configs} == {0.1, 0.3}
    assert {c["y"] for c in configs} == {0.0, 0.1, 0.2, 0.3}


def test_space_pickles_for_ray_checkpoints() -> None:
    import pickle

    space = load_space("quickstart").with_overrides({"epochs": 2})
    again = pickle.loads(pickle.dumps(space.define_by_run)).__self__
    assert again.params == space.params and again.base == space.base
    assert again.warm_starts() == space.warm_starts()


def test_space_imports_nothing_heavy() -> None:
    code = ("import sys; from dmlsearch import spaces; spaces.load_space('quickstart').describe(); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'ray')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent)


def test_ray_optuna_search_round_trip() -> None:
    """The real consumer: Ray's OptunaSearch with the define-by-run function and warm starts."""
    optuna_search = pytest.importorskip("ray.tune.search.optuna")
    space = load_space("quickstart")
    searcher = optuna_search.OptunaSearch(
        space=space.define_by_run, metric="score", mode="max",
        points_to_evaluate=space.warm_starts(), sampler=optuna.samplers.RandomSampler(seed=0))
    for i in range(6):
        sampled = searcher.suggest(f"t{i}")
        config = check_config(space, sampled)
        if i < 2:
            warm = space.warm_starts()[i]
            assert {k: sampled[k] for k in warm} == warm
        assert config["dataset"] == "glyphs"
        searcher.on_trial_complete(f"t{i}", {"score": 0.5})
