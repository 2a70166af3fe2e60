"""The shipped space files: each loads, builds valid trial configs (its choices, warm starts and
random samples), grid studies are finite categorical products of the published size, and the
values mirror the tables they cite (Psomas 2020, Ko et al. 2021, Monteiro et al. 2020). No
training."""

from __future__ import annotations

import itertools
import math
from typing import Any

import optuna
import pytest

from dmlsearch.spaces import Space
from dmlsearch.spaces import config_from_sample
from dmlsearch.spaces import load_space
from dmlsearch.spaces import space_names
from dmlsearch.spaces._params import same_value
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.losses import LOSSES

optuna.logging.set_verbosity(optuna.logging.WARNING)

SHIPPED = space_names()

#: Grid studies (run with ``--sampler grid``) and their number of points.
GRIDS = {
    "thesis_benchmark_cub200": 10 * 3 * 4,  # thesis ch. 4: losses x backbones x embedding sizes
    "thesis_benchmark_cars196": 10 * 3 * 4,
    "thesis_benchmark_sop": 10 * 3 * 4,
    "thesis_split_ratio": 4,  # Table 14: 70/30, 80/20, 90/10, 95/5
    "memvir_batch_size": 2 * 8,  # MemVir Table 1(a): (baseline, + MemVir) x 8 batch sizes
}

THESIS_LOSSES = ["contrastive", "triplet", "lifted_structure", "npair", "proxy_nca", "margin",
                 "arcface", "multi_similarity", "soft_triple", "proxy_anchor"]


# -- helpers --------------------------------------------------------------------------------------


def enumerate_grid(space: Space) -> list[dict[str, Any]]:
    """Every complete flat config of an all-categorical space (independent of Space.grid_points):
    walk the params in order, branching on each active param's choices."""
    configs: list[dict[str, Any]] = []

    def walk(i: int, config: dict[str, Any]) -> None:
        if i == len(space.params):
            configs.append(config)
            return
        p = space.params[i]
        if not p.is_active(config):
            walk(i + 1, config)
            return
        assert p.kind == "categorical", f"{space.name}: {p.optuna_name} is not categorical"
        for choice in p.choices:
            walk(i + 1, {**config, p.key: choice})

    walk(0, dict(space.base))
    return configs


def params_of(space: Space, key: str) -> list[Any]:
    return [p for p in space.params if p.key == key]


def only(space: Space, key: str) -> Any:
    found = params_of(space, key)
    assert len(found) == 1, (space.name, key, found)
    return found[0]


def stepped(space: Space, key: str) -> tuple[float, float, float]:
    p = only(space, key)
    assert p.kind == "float" and not p.log
    return (p.low, p.high, p.step)


def flat_warm_starts(space: Space) -> list[dict[str, Any]]:
    return [config_from_sample(w) for w in space.warm_starts()]


def has_point(points: list[dict[str, Any]], expected: dict[str, Any]) -> bool:
    return any(set(p) >= set(expected) and all(math.isclose(p[k], v) if isinstance(v, float)
                                               else same_value(p[k], v)
                                               for k, v in expected.items())
               for p in points)


# -- every shipped space --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_loads_and_shows_its_source(name: str) -> None:
    space = load_space(name)
    assert space.name == name and space.path is not None and space.path.stem == name
    assert space.source.strip() and space.description.strip()
    assert space.source in space.describe()


@pytest.mark.parametrize("name", SHIPPED)
def test_every_categorical_choice_builds_a_trial_config(name: str) -> None:
    """What search.prepare.prepare() checks before a search starts: each choice, in a branch
    where it applies (a conditional param's condition met by its first allowed values)."""
    space = load_space(name)
    TrialConfig.from_flat(space.default_config())
    for p in space.params:
        branch = {key: allowed[0] for key, allowed in p.when}
        for choice in p.choices or ():
            overrides = {**branch, p.key: choice}
            TrialConfig.from_flat(space.with_overrides(overrides).default_config())


@pytest.mark.parametrize("name", SHIPPED)
def test_warm_starts_and_random_samples_build_trial_configs(name: str) -> None:
    space = load_space(name)
    warm = space.warm_starts()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7))
    for point in warm:
        study.enqueue_trial(point)
    for i in range(len(warm) + 25):
        trial = study.ask()
        sampled = space.define_by_run(trial)
        config = config_from_sample(sampled)
        if i < len(warm):  # the warm start comes back exactly
            assert {k: sampled[k] for k in warm[i]} == warm[i]
        cfg = TrialConfig.from_flat(config)
        assert cfg.to_flat()["dataset"] == space.base["dataset"]
        study.tell(trial, 0.0)


@pytest.mark.parametrize("name", sorted(GRIDS))
def test_grid_studies_are_finite_categorical_products(name: str) -> None:
    space = load_space(name)
    assert all(p.kind == "categorical" for p in space.params)
    configs = enumerate_grid(space)
    assert len(configs) == GRIDS[name]
    # Conditional params have one choice per branch, so a plain Cartesian product over every
    # Optuna name (what optuna's GridSampler enumerates) has no duplicates either.
    assert math.prod(len(p.choices) for p in space.params) == GRIDS[name]
    if hasattr(space, "grid_points"):  # the driver's own walk, where present
        assert len(space.grid_points()) == GRIDS[name]
    seen = set()
    for config in configs:
        flat = TrialConfig.from_flat(config).to_flat()  # plugins: a list (YAML's)
        seen.add(tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                              for k, v in flat.items())))
    assert len(seen) == GRIDS[name]


# -- thesis Table 15 searches (Psomas 2020) -------------------------------------------------------


THESIS_SEARCHES = ["thesis_search_multi_similarity", "thesis_search_soft_triple",
                   "thesis_search_proxy_anchor", "thesis_proxy_search"]


@pytest.mark.parametrize("name", THESIS_SEARCHES)
def test_thesis_searches_use_the_fixed_validation_setup(name: str) -> None:
    cfg = TrialConfig.from_flat(load_space(name).default_config())
    assert (cfg.dataset, cfg.backbone, cfg.embedding_size) == ("cub200", "bninception", 512)
    assert (cfg.protocol, cfg.val_ratio, cfg.metric) == ("fixed", 0.1, "recall@1")
    # Table 3, CUB200 BNInception; ch. 3.4
    assert (cfg.lr, cfg.lr_step_size) == (1e-4, 10)
    assert (cfg.optimizer, cfg.lr_schedule, cfg.epochs, cfg.batch_size) == ("adamw", "step", 100,
                                                                          180)
    # The thesis code as its README runs it on CUB200: --bn-freeze 1, --warm 1, clipping at 10
    assert (cfg.freeze_bn, cfg.head_warmup_epochs, cfg.grad_clip) == ("stats", 1, 10.0)
    # The decay factor: the code's default 0.5 first (what trained the published numbers),
    # Table 3's 0.1 also searched and warm-started
    space = load_space(name)
    assert only(space, "lr_gamma").choices == (0.5, 0.1) and cfg.lr_gamma == 0.5
    assert {p["lr_gamma"] for p in flat_warm_starts(space)} == {0.5, 0.1}


def test_multi_similarity_table_15() -> None:
    space = load_space("thesis_search_multi_similarity")
    assert stepped(space, "loss.margin") == (0.0, 1.0, 0.1)
    assert stepped(space, "loss.alpha") == (2.0, 100.0, 2.0)
    assert stepped(space, "loss.beta") == (2.0, 100.0, 2.0)
    assert stepped(space, "loss.epsilon") == (0.0, 1.0, 0.1)
    assert (space.base["batch_sampler"], space.base["m_per_class"]) == ("m_per_class", 5)
    points = flat_warm_starts(space)
    # thesis optimum (= MLRC "MS + Miner" on the grid), MLRC "MS" on the grid, Table 4
    assert points[0] == {"loss.margin": 0.8, "loss.alpha": 18.0, "loss.beta": 76.0,
                         "loss.epsilon": 0.4, "lr_gamma": 0.5}
    assert has_point(points, {"loss.margin": 0.6, "loss.alpha": 2.0, "loss.beta": 50.0})
    assert has_point(points, {"loss.margin": 0.5, "loss.alpha": 2.0, "loss.beta": 50.0,
                              "loss.epsilon": 0.1})


def test_soft_triple_table_15() -> None:
    space = load_space("thesis_search_soft_triple")
    assert stepped(space, "loss.margin") == (0.0, 1.0, 0.1)
    assert stepped(space, "loss.scale") == (2.0, 100.0, 2.0)
    assert stepped(space, "loss.lr") == (1e-5, 1e-4, 1e-5)
    assert stepped(space, "loss.gamma") == (10.0, 100.0, 10.0)
    assert stepped(space, "loss.tau") == (0.0, 1.0, 0.1)
    assert len(only(space, "loss.lr").grid_values()) == 10
    points = flat_warm_starts(space)
    # optimum 0.4 / 78 / 5e-5 / 58 (-> 60, the nearest value of the step-10 grid) / 0.4
    assert has_point(points, {"loss.margin": 0.4, "loss.scale": 78.0, "loss.lr": 5e-5,
                              "loss.gamma": 60.0, "loss.tau": 0.4})
    assert has_point(points, {"loss.margin": 0.1, "loss.scale": 20.0, "loss.lr": 1e-4,
                              "loss.gamma": 10.0, "loss.tau": 0.2})


def test_proxy_anchor_table_15_and_thesis_proxy() -> None:
    pa = load_space("thesis_search_proxy_anchor")
    assert stepped(pa, "loss.margin") == (0.0, 1.0, 0.1)
    assert stepped(pa, "loss.alpha") == (2.0, 100.0, 2.0)
    assert flat_warm_starts(pa) == [{"loss.margin": 0.1, "loss.alpha": 32.0, "lr_gamma": 0.5},
                                    {"loss.margin": 0.1, "loss.alpha": 32.0, "lr_gamma": 0.1}]
    ours = load_space("thesis_proxy_search")
    assert only(ours, "loss.variant").choices == (1, 2)
    assert stepped(ours, "loss.margin") == stepped(pa, "loss.margin")
    assert stepped(ours, "loss.alpha") == stepped(pa, "loss.alpha")
    assert {p["loss.variant"] for p in flat_warm_starts(ours)} == {1, 2}


# -- thesis benchmark grid and split study --------------------------------------------------------


TABLE_3 = {  # (dataset, backbone) -> (lr, step size, gamma)
    ("cub200", "resnet50"): (1e-4, 5, 0.1), ("cub200", "bninception"): (1e-4, 10, 0.1),
    ("cub200", "googlenet"): (1e-4, 10, 0.1), ("cars196", "resnet50"): (1e-4, 10, 0.1),
    ("cars196", "bninception"): (1e-4, 20, 0.1), ("cars196", "googlenet"): (1e-4, 20, 0.1),
    ("sop", "resnet50"): (6e-4, 10, 0.25), ("sop", "bninception"): (6e-4, 20, 0.25),
    ("sop", "googlenet"): (6e-4, 20, 0.25),
}
TABLE_4 = {
    "contrastive": {"margin": 0.5}, "triplet": {"margin": 0.1},
    "lifted_structure": {"margin": 0.5, "variant": 1.0}, "npair": {"l2_reg": 0.02}, "proxy_nca": {"lr": 1e-5},
    "margin": {"margin": 0.5, "beta": 1.2, "lr": 5e-5},
    "arcface": {"margin": 28.6, "scale": 64.0, "lr": 1e-4},
    "multi_similarity": {"margin": 0.5, "alpha": 2.0, "beta": 50.0, "epsilon": 0.1},
    "soft_triple": {"margin": 0.1, "scale": 20.0, "lr": 1e-4, "gamma": 10.0, "tau": 0.2},
    "proxy_anchor": {"margin": 0.1, "alpha": 32.0},
}


def test_loss_defaults_are_table_4() -> None:
    """The benchmark grid leaves loss hyperparameters at the defaults: they must be Table 4's."""
    for loss, values in TABLE_4.items():
        defaults = LOSSES.get(loss).defaults
        assert {k: defaults[k] for k in values} == values, loss


@pytest.mark.parametrize("dataset", ["cub200", "cars196", "sop"])
def test_benchmark_grid_mirrors_tables_3_and_4(dataset: str) -> None:
    space = load_space(f"thesis_benchmark_{dataset}")
    cells = set()
    for config in enumerate_grid(space):
        cfg = TrialConfig.from_flat(config)
        assert cfg.dataset == dataset and cfg.epochs == 100 and cfg.optimizer == "adamw"
        assert (cfg.lr, cfg.lr_step_size, cfg.lr_gamma) == TABLE_3[dataset, cfg.backbone]
        assert cfg.batch_size == (100 if cfg.backbone == "resnet50" else 180)
        assert cfg.loss_params == LOSSES.get(cfg.loss).defaults
        pairs = LOSSES.get(cfg.loss).needs_m_per_class
        assert cfg.batch_sampler == ("m_per_class" if pairs else "random")
        assert cfg.metric == "recall@1" and cfg.protocol == "fixed" and cfg.val_ratio == 0.1
        # The thesis code as its README runs it: --bn-freeze 1 on CUB200 and CARS196, 0 on
        # SOP; --warm 1 for BNInception, 5 for ResNet50
        assert cfg.freeze_bn == ("off" if dataset == "sop" else "stats")
        assert cfg.head_warmup_epochs == (5 if cfg.backbone == "resnet50" else 1)
        cells.add((cfg.loss, cfg.backbone, cfg.embedding_size))
    assert cells == set(itertools.product(THESIS_LOSSES, ["googlenet", "bninception", "resnet50"],
                                          [64, 128, 512, 1024]))


def test_split_ratio_study_is_table_14() -> None:
    space = load_space("thesis_split_ratio")
    assert only(space, "val_ratio").choices == (0.3, 0.2, 0.1, 0.05)
    cfg = TrialConfig.from_flat(space.default_config())
    assert (cfg.dataset, cfg.backbone, cfg.embedding_size, cfg.loss) == (
        "cub200", "bninception", 512, "multi_similarity")
    assert dict(cfg.loss_params) == TABLE_4["multi_similarity"]


# -- MemVir (Ko et al. 2021) ----------------------------------------------------------------------


def test_memvir_search_space_and_recipes() -> None:
    space = load_space("memvir_search")
    assert set(only(space, "loss").choices) == {"norm_softmax", "cosface", "arcface",
                                                "curricular_face", "proxy_nca", "proxy_anchor"}
    n, m = only(space, "memvir_n"), only(space, "memvir_m")
    assert (n.kind, n.low, n.high, m.kind, m.low, m.high) == ("int", 1, 50, "int", 0, 100)
    base = TrialConfig.from_flat(space.default_config())
    assert (base.dataset, base.backbone, base.embedding_size, base.batch_size) == (
        "cars196", "bninception", 512, 128)
    assert (base.optimizer, base.lr, base.loss_params["lr"], base.lr_schedule, base.epochs) == (
        "adam", 1e-4, 1e-2, "none", 2000)
    points = flat_warm_starts(space)
    assert has_point(points, {"loss": "norm_softmax", "memvir_n": 45, "memvir_m": 10,
                              "memvir_warmup_epochs": 40, "loss.scale": 23})
    assert has_point(points, {"loss": "proxy_nca", "memvir_n": 20, "memvir_m": 25,
                              "memvir_warmup_epochs": 40, "loss.scale": 12})
    for point in points:
        assert TrialConfig.from_flat(space.with_overrides(point).default_config()).memvir_n > 0


def test_memvir_batch_size_study_is_table_1a() -> None:
    space = load_space("memvir_batch_size")
    assert only(space, "batch_size").choices == (8, 16, 32, 64, 128, 256, 512, 1024)
    assert only(space, "memvir_n").choices == (0, 45)
    cfg = TrialConfig.from_flat(space.with_overrides({"memvir_n": 45}).default_config())
    assert (cfg.loss, cfg.memvir_m, cfg.memvir_warmup_epochs, cfg.loss_params["scale"]) == (
        "norm_softmax", 10, 40, 23.0)


@pytest.mark.parametrize("name", ["memvir_search", "memvir_batch_size"])
def test_memvir_spaces_train_with_the_codes_optimiser_and_frozen_bn(name: str) -> None:
    """MemVir main.py: Adam with --eps 0.01 (its default); README commands: --freeze_BN."""
    cfg = TrialConfig.from_flat(load_space(name).default_config())
    assert (cfg.optimizer, cfg.adam_eps, cfg.freeze_bn) == ("adam", 0.01, "stats")


# -- learned distance (Monteiro et al. 2020) ------------------------------------------------------


A2_GRID = {
    "lr": (0.5, 0.1, 0.01, 0.001), "weight_decay": (0.01, 0.001, 1e-4, 1e-5),
    "momentum": (0.1, 0.5, 0.9), "loss.label_smoothing": (0.01, 0.1, 0.2),
    "lr_patience": (1, 5, 10, 20), "loss.d_layers": (2, 3, 4, 5),
    "loss.d_size": (128, 256, 350, 512), "loss.d_dropout": (0.01, 0.1, 0.2),
    "loss.aux_margin": (0.0, 0.35),
}
A2_CHOSEN = {  # the * values of appendix A.2.1
    "cifar10": {"lr": 0.01, "weight_decay": 0.001, "momentum": 0.9, "loss.label_smoothing": 0.2,
                "lr_patience": 10, "loss.d_layers": 3, "loss.d_size": 350,
                "loss.d_dropout": 0.2, "loss.aux_margin": 0.35},
    "mini_imagenet": {"lr": 0.01, "weight_decay": 0.001, "momentum": 0.9,
                      "loss.label_smoothing": 0.1, "lr_patience": 10, "loss.d_layers": 3,
                      "loss.d_size": 350, "loss.d_dropout": 0.1, "loss.aux_margin": 0.35},
}


@pytest.mark.parametrize("dataset", sorted(A2_CHOSEN))
def test_e2e_grid_is_appendix_a2(dataset: str) -> None:
    space = load_space(f"e2e_{dataset}")
    assert {p.key: p.choices for p in space.params} == A2_GRID
    assert flat_warm_starts(space) == [A2_CHOSEN[dataset]]
    cfg = TrialConfig.from_flat(space.default_config())
    assert (cfg.dataset, cfg.loss, cfg.metric, cfg.optimizer, cfg.lr_schedule) == (
        dataset, "e2e", "eer_e2e", "sgd", "plateau")
    assert (cfg.backbone, cfg.pretrained, cfg.epochs) == ("resnet18", "none", 600)
    assert cfg.batch_size == {"cifar10": 64, "mini_imagenet": 128}[dataset]


A3_GRID = {  # appendix A.3.4; base learning rates {2.0, 1.5, 1.0, 0.5, 0.1} / sqrt(4000)
    "lr": (0.031623, 0.023717, 0.015811, 0.0079057, 0.0015811),
    "weight_decay": (1e-3, 1e-4, 1e-5), "momentum": (0.7, 0.85, 0.95),
    "loss.label_smoothing": (0.0, 0.1, 0.2), "embedding_size": (128, 256, 512),
    "max_frames": (300, 500, 800), "grad_clip_norm": (10, 20, 50),
    "loss.d_layers": (1, 2, 3, 4), "loss.d_size": (128, 256, 350, 512),
    "loss.d_dropout": (0.01, 0.1, 0.2), "loss.aux_margin": (0.0, 0.35),
}
A3_CHOSEN = {"lr": 0.023717, "weight_decay": 1e-3, "momentum": 0.95,
             "loss.label_smoothing": 0.1, "embedding_size": 256, "max_frames": 800,
             "grad_clip_norm": 10, "loss.d_layers": 4, "loss.d_size": 256,
             "loss.d_dropout": 0.1, "loss.aux_margin": 0.35}


def test_e2e_voxceleb_grid_is_appendix_a3() -> None:
    space = load_space("e2e_voxceleb")
    assert {p.key: p.choices for p in space.params} == A3_GRID
    for base, lr in zip((2.0, 1.5, 1.0, 0.5, 0.1), A3_GRID["lr"]):
        assert lr == pytest.approx(base / 4000 ** 0.5, rel=1e-4)
    assert flat_warm_starts(space) == [A3_CHOSEN]
    cfg = TrialConfig.from_flat(space.default_config())
    assert (cfg.dataset, cfg.backbone, cfg.loss, cfg.metric) == (
        "voxceleb2", "tdnn", "e2e", "eer_e2e")
    assert (cfg.audio_features, cfg.n_features, cfg.vad, cfg.cmn_window) == (
        "mfcc", 30, True, 300)
    assert (cfg.batch_sampler, cfg.m_per_class, cfg.batch_size) == ("m_per_class", 5, 120)
    assert (cfg.optimizer, cfg.nesterov, cfg.lr_schedule, cfg.warmup_steps) == (
        "sgd", True, "warmup_invsqrt_steps", 4000)
    assert cfg.epochs == 66 and cfg.loss_params["aux_scale"] == 30.0
    assert "budget of 40" in " ".join(space.description.split())
