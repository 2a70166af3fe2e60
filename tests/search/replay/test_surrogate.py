"""A sampled table answers any configuration through its surrogate: whole curves predicted per
branch, close to a known smooth truth measured with noise, on held-out points (closer than the
nearest recorded point, which repeats its noise), the branch a configuration's choices pick,
ranges it does not extrapolate beyond, the order a sampled table is recorded in, and scores
predicted apart from a loss on another scale."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from dmlsearch.search.replay import Curve
from dmlsearch.search.replay import CurveTable
from dmlsearch.search.replay import check_space
from dmlsearch.search.replay import config_key
from dmlsearch.search.replay import lookup
from dmlsearch.search.replay.recording import design_jobs
from dmlsearch.search.replay.surrogate import held_out_fit
from dmlsearch.search.replay.surrogate import log_scaled
from dmlsearch.search.replay.surrogate import surrogate_for
from dmlsearch.spaces import Param
from dmlsearch.spaces import Space
from dmlsearch.trainables.errors import UserError

EPOCHS = 4
RECORDED = """\
params:
  - loss: {type: categorical, choices: [ms, pa]}
  - lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
  - margin: {type: float, low: 0.0, high: 1.0}
"""


def truth(config: dict) -> float:
    """A smooth final score: best at lr 1e-3 and margin 0.7 (ms) / 0.3 (pa)."""
    best = 0.7 if config["loss"] == "ms" else 0.3
    return 0.8 - 0.1 * math.log10(config["lr"] / 1e-3) ** 2 - 0.3 * (config["margin"] - best) ** 2


def _curve(config: dict, noise: float = 0.0, seed: int = 0) -> Curve:
    final = truth(config) + noise
    rows = [{"epoch": e, "train_loss": 1.0 / e, "seconds": 2.0, "cpu_seconds": 1.0 + 0.1 * e,
             "val": {"map@r": final * (1 - 0.5 ** e)}, "test": {"map@r": 0.6 * final * (1 - 0.5 ** e)}}
            for e in range(1, EPOCHS + 1)]
    return Curve(config=config, seed=seed, status="ok", reason=None, epochs=rows,
                 best_epoch=EPOCHS, test_at_best=rows[-1]["test"])


def sampled_table(count: int = 240, seed: int = 0) -> CurveTable:
    rng = random.Random(seed)
    curves = {}
    for _ in range(count):
        config = {"loss": rng.choice(["ms", "pa"]), "lr": 10 ** rng.uniform(-4, -2),
                  "margin": rng.uniform(0, 1)}
        # the noise between two trainings of one configuration (about 0.025 on the tables)
        curves[(config_key(config), 0)] = _curve(config, noise=rng.gauss(0.0, 0.025))
    return CurveTable(path=Path(f"sampled-{count}-{seed}.jsonl"), curves=curves, header={
        "metric": "map@r", "base": {"epochs": EPOCHS, "dataset": "glyphs"},
        "design": {"kind": "sobol"}, "space": RECORDED})


def test_the_recorded_spaces_log_ranges_are_read_from_the_header() -> None:
    assert log_scaled(sampled_table(10)) == {"lr"}


def test_a_sampled_table_answers_between_its_points_close_to_the_truth() -> None:
    table = sampled_table()
    assert table.sampled
    rng = random.Random(7)
    errors = []
    for _ in range(40):
        config = {"loss": rng.choice(["ms", "pa"]), "lr": 10 ** rng.uniform(-3.8, -2.2),
                  "margin": rng.uniform(0.05, 0.95), "epochs": EPOCHS, "seed": 3}
        curve = lookup(table, config)
        assert [r["epoch"] for r in curve.epochs] == list(range(1, EPOCHS + 1))
        assert curve.config == {k: config[k] for k in ("loss", "lr", "margin")}
        final = max(r["val"]["map@r"] for r in curve.epochs)
        errors.append(abs(final - truth(config) * (1 - 0.5 ** EPOCHS)))
        # the test score of the model selected at the last epoch, about 0.6 x its validation
        assert curve.test_at(EPOCHS, "map@r", "max")["map@r"] == pytest.approx(
            0.6 * curve.epochs[-1]["val"]["map@r"], abs=0.03)
    assert sum(errors) / len(errors) < 0.02  # the scores span 0.4 to 0.75


def test_the_configurations_choice_picks_its_branch() -> None:
    table = sampled_table()
    surrogate = surrogate_for(table)
    assert len(surrogate.branches) == 2
    ms = {"loss": "ms", "lr": 1e-3, "margin": 0.7}
    pa = {**ms, "loss": "pa"}
    assert lookup(table, ms).epochs[-1]["val"]["map@r"] > lookup(table, pa).epochs[-1]["val"][
        "map@r"]  # the same values score higher where they are the branch's optimum
    with pytest.raises(UserError, match="has no branch for"):
        lookup(table, {"loss": "contrastive", "lr": 1e-3, "margin": 0.5})
    with pytest.raises(UserError, match="has no branch for"):
        lookup(table, {"loss": "ms", "lr": 1e-3})  # a setting the table varies is missing


def test_held_out_fit_beats_the_nearest_recorded_point() -> None:
    report = held_out_fit(sampled_table(), folds=4)
    assert [len(b["keys"]) for b in report["branches"]] == [3, 3]
    for branch in report["branches"]:
        assert branch["trees"]["r2_val"] > 0.5  # bounded by the noise
        assert branch["trees"]["mae_val"] < branch["nearest"]["mae_val"]
        assert branch["trees"]["spearman_val"] > branch["nearest"]["spearman_val"]
    assert report["seed_noise"]["pairs"] == 0 and report["failed"] == 0


def test_a_loss_on_another_scale_does_not_steer_the_scores_model() -> None:
    """The training loss spreads a hundred times wider than the scores and is set by the
    learning rate alone, the scores by the margin alone: the scores are still predicted from
    the margin (one model of all targets would split on the learning rate)."""
    rng = random.Random(0)
    curves = {}
    for _ in range(200):
        config = {"loss": "pa", "lr": 10 ** rng.uniform(-4, -2), "margin": rng.uniform(0, 1)}
        curve = _curve(config, noise=rng.gauss(0.0, 0.01))
        for row in curve.epochs:
            row["train_loss"] = 40.0 * (math.log10(config["lr"]) + 4) ** 3 / row["epoch"]
        curves[(config_key(config), 0)] = curve
    table = CurveTable(path=Path("loss-scale.jsonl"), curves=curves, header={
        "metric": "map@r", "base": {"epochs": EPOCHS, "dataset": "glyphs"},
        "design": {"kind": "sobol"}, "space": RECORDED})
    (branch,) = held_out_fit(table)["branches"]
    assert branch["trees"]["r2_val"] > 0.9
    config = {"loss": "pa", "lr": 10 ** -2.1, "margin": 0.35}
    curve = lookup(table, config)
    assert curve.epochs[-1]["val"]["map@r"] == pytest.approx(
        truth(config) * (1 - 0.5 ** EPOCHS), abs=0.03)
    assert curve.epochs[0]["train_loss"] == pytest.approx(40.0 * 1.9 ** 3, rel=0.1)


def _space(*params: Param) -> Space:
    return Space(name="s", description="", source="a test", path=None,
                 base={"epochs": EPOCHS, "dataset": "glyphs"}, params=params)


def test_a_sampled_table_answers_spaces_within_its_ranges_only() -> None:
    table = sampled_table()
    loss = Param(key="loss", kind="categorical", choices=("ms", "pa"))
    margin = Param(key="margin", kind="float", low=0.0, high=1.0, step=0.1)
    check_space(table, _space(loss, Param(key="lr", kind="float", low=1e-4, high=1e-2,
                                          log=True), margin))
    with pytest.raises(UserError, match="a surrogate does not extrapolate"):
        check_space(table, _space(loss, Param(key="lr", kind="float", low=1e-5, high=1e-2,
                                              log=True), margin))
    with pytest.raises(UserError, match=r"recorded no loss = \['triplet'\]"):
        check_space(table, _space(Param(key="loss", kind="categorical",
                                        choices=("ms", "triplet")), margin))


def _sample_space() -> Space:
    return Space(name="s", description="", source="a test", path=None,
                 base={"dataset": "glyphs"},
                 params=[Param(key="lr", kind="float", low=1e-4, high=1e-2, log=True)],
                 warm_start=[{"lr": 1e-3}])


def test_a_sample_is_recorded_warm_starts_first_with_second_seeds_interleaved() -> None:
    jobs = design_jobs(_sample_space(), sample=9, second_seed=2)
    configs = [c for c, _ in jobs]
    assert configs[0] == {"lr": 1e-3} and jobs[0][1] == 0  # the published point first
    seeds = [s for _, s in jobs]
    assert seeds.count(0) == 10 and seeds.count(1) == 2
    # each repeat right after its first training, one every len // 2 points
    for i, (config, seed) in enumerate(jobs):
        if seed == 1:
            assert jobs[i - 1] == (config, 0)
    assert [i for i, (_, s) in enumerate(jobs) if s == 1] == [5, 11]
    with pytest.raises(UserError, match="--sample must be at least 1"):
        design_jobs(_sample_space(), sample=0, second_seed=0)
