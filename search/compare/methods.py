"""The methods a comparison searches, each as a search space over the settings every method
shares.

A **method** is either a loss by name (``--methods proxy_anchor``), searched over

- the thesis's Table 15 grid where the thesis has one (MultiSimilarity, SoftTriple,
  ProxyAnchor: the shipped ``thesis_search_<loss>`` spaces' params and warm starts), or
- otherwise the learning rate (a decade either side of the shared one) and the loss's Table 4
  parameters around their defaults (:data:`AROUND_DEFAULTS`, two octaves either side unless the
  parameter's domain is narrower), warm-started at the Table 4 defaults;

or a space file (``--space FILE``: a MemVir-wrapped loss, a custom grid), named after its file.

**Shared settings** (:func:`shared_settings`) are what makes the comparison fair: the dataset,
its class split and protocol, the backbone and embedding, the epochs and batches, the metric and
the seed are the same for every method. :data:`FAIR_KEYS` lists them; a space file that fixes
one of them to another value, or searches one, is refused (the error says which and how to fix
it); one that leaves them out gets the shared values.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from dmlsearch.spaces import Param
from dmlsearch.spaces import Space
from dmlsearch.spaces import load_space
from dmlsearch.spaces import space_names
from dmlsearch.trainables.config import LOSS_PREFIX
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.input_kinds import kind_of_names

__all__ = ["AROUND_DEFAULTS", "DEMO_BASE", "DEMO_METHODS", "FAIR_KEYS", "Method", "method_names",
           "resolve_methods", "shared_settings"]

#: The settings every method of a comparison shares (Psomas 2020 §3.5.1: one protocol for all, the
#: thesis's criticism of its field's tables); a method's space may not change or search them.
FAIR_KEYS = ("dataset", "data_root", "image_size", "protocol", "val_ratio", "folds", "repeats",
             "split_seed", "seed", "backbone", "pretrained", "embedding_size", "pooling",
             "epochs", "batch_size", "batch_sampler", "m_per_class", "metric")

#: The comparison on the built-in ``glyphs`` data (no --dataset): the quickstart space's CPU
#: setting (a small CNN, class-disjoint 80/20 validation, AdamW + StepLR as in the thesis's
#: ch. 3.4, MAP@R because Recall@1 saturates on a dozen validation classes; Musgrave et al.,
#: ECCV 2020), 6 epochs so that three methods search and retrain in about 10 minutes on 2 cores.
DEMO_BASE: dict[str, Any] = {
    "dataset": "glyphs", "backbone": "smallcnn", "protocol": "fixed", "val_ratio": 0.2,
    "split_seed": 0, "embedding_size": 64, "epochs": 6, "batch_size": 64,
    "batch_sampler": "m_per_class", "m_per_class": 4, "optimizer": "adamw",
    "lr_schedule": "step", "lr": 1.0e-3, "lr_step_size": 3, "lr_gamma": 0.5,
    "weight_decay": 1.0e-4, "metric": "map@r",
}

#: The built-in demo's methods: a Table 15 pair loss, a Table 15 proxy loss, and the classic
#: pair loss searched around its Table 4 default.
DEMO_METHODS = ("multi_similarity", "proxy_anchor", "contrastive")

#: The thesis's search setting for its datasets (ch. 5.2: BNInception, 512-d; Table 3 training
#: per dataset), taken from the shipped ``thesis_benchmark_<dataset>`` grids; batches are
#: balanced for every method (5 images per class, ch. 3.4), so all methods see the same batches.
_THESIS_SETTING = {"backbone": "bninception", "embedding_size": 512,
                   "batch_sampler": "m_per_class"}

#: Search ranges around the Table 4 defaults (Psomas 2020) of the losses without a Table 15 grid:
#: (low, high, log). Two octaves either side of the default (÷4 … ×4, log-uniform) unless the
#: parameter's domain is narrower (an angle below 90 degrees, a cosine margin below 1).
AROUND_DEFAULTS: dict[str, dict[str, tuple[float, float, bool]]] = {
    # Table 4: margin 0.5 (a distance between unit vectors: at most 2)
    "contrastive": {"margin": (0.125, 2.0, True)},
    # Table 4: margin 0.1
    "triplet": {"margin": (0.025, 0.4, True)},
    # Table 4: margin 0.5
    "lifted_structure": {"margin": (0.125, 2.0, True)},
    # Table 4: l2 regularisation 0.02
    "npair": {"l2_reg": (0.005, 0.08, True)},
    # Table 4: proxy lr 1e-5; the scale of the reference code, 32
    "proxy_nca": {"lr": (2.5e-6, 4e-5, True), "scale": (8.0, 128.0, True)},
    # Table 4: margin 0.5, beta 1.2, beta lr 5e-5
    "margin": {"margin": (0.125, 2.0, True), "beta": (0.3, 4.8, True),
               "lr": (1.25e-5, 2e-4, True)},
    # Table 4: margin 28.6 degrees (0.5 rad), scale 64, weights lr 1e-4
    "arcface": {"margin": (7.15, 60.0, True), "scale": (16.0, 128.0, True),
                "lr": (2.5e-5, 4e-4, True)},
    # Wang et al. 2018: cosine margin 0.35, scale 64
    "cosface": {"margin": (0.0875, 0.8, True), "scale": (16.0, 128.0, True),
                "lr": (2.5e-3, 4e-2, True)},
    # Huang et al. 2020: margin 0.5 rad, scale 64
    "curricular_face": {"margin": (0.125, 1.0, True), "scale": (16.0, 128.0, True),
                        "lr": (2.5e-3, 4e-2, True)},
    # MemVir's NormSoftmax: scale 23
    "norm_softmax": {"scale": (5.75, 92.0, True), "lr": (2.5e-3, 4e-2, True)},
}

_TABLE15 = "thesis_search_{loss}"  # the shipped Table 15 spaces
_LR_SPAN = 10.0  # the learning rate's range: a decade either side of the shared value


@dataclasses.dataclass(frozen=True)
class Method:
    """One method of a comparison: its name, its space (the shared settings applied), and
    where its grid comes from."""

    name: str
    space: Space
    origin: str  # "table 15", "around defaults" or "space file"

    @property
    def source(self) -> str:
        return " ".join(self.space.source.split())


def method_names() -> list[str]:
    """The losses a comparison can name as methods."""
    from dmlsearch.trainables.losses import LOSSES

    return LOSSES.names()


def shared_settings(dataset: str | None, given: Mapping[str, Any]) -> dict[str, Any]:
    """The settings every method shares: the built-in demo's (no dataset, or glyphs), the
    thesis's search setting for CUB200, CARS196 and SOP, the source's VoxCeleb setting for
    audio (:func:`kind_setting`), else the settings' own defaults with that dataset; then the
    user's (``given``: --dataset, --data-root, --protocol, --set, seed)."""
    if dataset in (None, "glyphs"):
        base = dict(DEMO_BASE)
    elif kind_of_names((dataset,)).compare_space:
        base = kind_setting(dataset)
    elif f"thesis_benchmark_{dataset}" in space_names():
        grid = load_space(f"thesis_benchmark_{dataset}").with_overrides(
            {**_THESIS_SETTING, "loss": "multi_similarity"})  # a pair loss: balanced batches
        base = {k: v for k, v in grid.default_config().items()
                if k != "loss" and not k.startswith("loss.")}
    else:
        base = {"dataset": dataset}
    return {**base, **given}


def kind_setting(dataset: str) -> dict[str, Any]:
    """The shared settings of a comparison on ``dataset``, of an input kind with a
    ``compare_space`` (:mod:`trainables.input_kinds`), and ``compare_metric``: that space's fixed
    values and chosen configuration, its preview on the kind's built-in ``preview_dataset``; the
    loss's own settings left out. Audio: the source's VoxCeleb setting (Monteiro et al. 2020,
    the shipped ``e2e_voxceleb``: TDNN on 30 MFCCs, 5 x 24 batches, SGD with warm-up and
    inverse-square-root decay) and the metric ``eer``: each method's own scoring (D for e2e,
    cosine for the others)."""
    from dmlsearch.spaces import preview

    kind = kind_of_names((dataset,))
    space = load_space(kind.compare_space)
    built_in = dataset == kind.preview_dataset
    if built_in:
        space, _ = preview(space)
    machine = ("device", "workers", "precision", "channels_last")  # the preview's CPU: not shared
    config = {k: v for k, v in space.default_config().items()
              if k != "loss" and not k.startswith("loss.") and k not in machine}
    config.update(dataset=dataset, metric=kind.compare_metric)
    if built_in:
        config.pop("data_root", None)
    return config


def resolve_methods(losses: Sequence[str], space_files: Sequence[str], *,
                    shared: Mapping[str, Any], given: Mapping[str, Any]) -> list[Method]:
    """The comparison's methods, each space with the shared settings applied and the user's
    settings (``given``) on top; a user error for an unknown loss, a repeated name, fewer than
    two methods, or a space file that contradicts the shared settings."""
    from dmlsearch.trainables.losses import LOSSES

    methods: list[Method] = []
    for loss in losses:
        if loss not in LOSSES:  # a shipped loss, a plug-in's, or pml:<ClassName>
            known = [*method_names(), *LOSSES.families()]
            raise UserError(f"unknown method {loss!r} in --methods; expected loss names ("
                            f"{', '.join(known)}), or give a space file with --space (a "
                            "plug-in's loss: give its file with --plugin)")
        methods.append(_loss_method(loss, shared))
    for file in space_files:
        methods.append(_file_method(file, shared))
    names = [m.name for m in methods]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UserError(f"method {repeated[0]!r} is given twice; expected each method once "
                        "(rename a space file to compare two spaces of the same loss)")
    if len(methods) < 2:
        raise UserError(f"a comparison needs at least two methods, got {len(methods)} ("
                        f"{', '.join(names) or 'none'}); name more with --methods or --space "
                        "(one method alone is a search: `dmlsearch run`)")
    return [dataclasses.replace(m, space=m.space.with_overrides(dict(given))) for m in methods]


def _loss_method(loss: str, shared: Mapping[str, Any]) -> Method:
    base = {**shared, "loss": loss}
    if _TABLE15.format(loss=loss) in space_names():
        grid = load_space(_TABLE15.format(loss=loss))
        space = Space(
            name=loss, description=f"{loss}: the thesis's Table 15 grid, on the comparison's "
            "shared settings", path=None, base=base,
            source=f"Psomas 2020, \"Metric Learning: A Deep Dive\" (thesis), ch. 5.2, Table 15: "
            f"the {loss} grid of the shipped space {grid.name} (its loss params; warm starts: the "
            "thesis's optimum and the Table 4 defaults), on the comparison's shared settings",
            params=[p for p in grid.params if p.key.startswith(LOSS_PREFIX)],
            warm_start=_loss_points(grid))
        return Method(loss, space, "table 15")
    from dmlsearch.trainables.losses import LOSSES

    info = LOSSES.get(loss)
    lr = float(shared.get("lr", 1e-3))
    params = [Param(key="lr", kind="float", low=_round(lr / _LR_SPAN), high=_round(lr * _LR_SPAN),
                    log=True)]
    ranges = AROUND_DEFAULTS.get(loss) or _default_ranges(info.defaults)
    for name, (low, high, log) in ranges.items():
        params.append(Param(key=f"loss.{name}", kind="float", low=low, high=high, log=log))
    defaults = {f"loss.{k}": float(v) for k, v in info.defaults.items() if k in ranges}
    searched = {p.key for p in params}
    space = Space(
        name=loss, description=f"{loss}: the learning rate and the loss's parameters around "
        "their published defaults, on the comparison's shared settings",
        source=f"{info.source}; ranges: {_ranges_text(lr, ranges)} (dmlsearch "
        "search/compare/methods.py: two octaves either side of the Table 4 default, within "
        "the parameter's domain; lr a decade either side of the shared lr); warm start: the "
        "defaults", path=None, params=params,
        base={k: v for k, v in base.items() if k not in searched},  # a fixed key is not searched
        warm_start=[{"lr": lr, **defaults}])
    return Method(loss, space, "around defaults")


def _loss_points(grid: Space) -> list[dict[str, Any]]:
    """A Table 15 grid's warm starts (the thesis's optimum and the Table 4 defaults), loss keys
    only: the grid's own base (CUB200, BNInception) is not the comparison's."""
    assert all(not p.when for p in grid.params)  # unconditional: Optuna names are the keys
    points: list[dict[str, Any]] = []
    for point in grid.warm_starts():  # the grid also searches lr_gamma: not the loss's own
        loss_only = {k: v for k, v in point.items() if k.startswith(LOSS_PREFIX)}
        if loss_only not in points:
            points.append(loss_only)
    return points


def _default_ranges(defaults: Mapping[str, float]) -> dict[str, tuple[float, float, bool]]:
    """A loss without an entry in :data:`AROUND_DEFAULTS`: its positive non-integer defaults,
    two octaves either side (integer-valued ones, such as layer counts, stay fixed)."""
    return {k: (_round(v / 4), _round(v * 4), True) for k, v in defaults.items()
            if v > 0 and float(v) != int(v)}


def _file_method(file: str, shared: Mapping[str, Any]) -> Method:
    space = load_space(file)
    where = str(space.path or file)
    for key in FAIR_KEYS:
        searched = [p for p in space.params if p.key == key]
        if searched:
            line = f"{where}:{searched[0].line}" if searched[0].line else where
            raise UserError(
                f"{line}: the space searches {key}, a setting every method of a comparison "
                f"shares; expected it fixed (shared value {shared.get(key, '(default)')!r}); "
                f"remove it from params, or compare with `--set {key}=VALUE` for all methods")
        if key in space.base and key in shared and not _same(space.base[key], shared[key]):
            raise UserError(
                f"{where}: the space sets {key}: {space.base[key]!r} in its base, but the "
                f"comparison shares {key}: {shared[key]!r}; expected the same value for every "
                f"method: remove {key} from the space's base, or pass --set "
                f"{key}={space.base[key]} to compare every method with it")
    fair = {k: v for k, v in shared.items() if k in FAIR_KEYS}
    rest = {k: v for k, v in shared.items() if k not in FAIR_KEYS and k not in space.base
            and k not in {p.key for p in space.params}}
    return Method(space.name, space.with_overrides({**rest, **fair}), "space file")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return str(a) == str(b)


def _round(value: float) -> float:
    return float(f"{value:.3g}")


def _ranges_text(lr: float, ranges: Mapping[str, tuple[float, float, bool]]) -> str:
    parts = [f"lr [{_round(lr / _LR_SPAN):g}, {_round(lr * _LR_SPAN):g}] log"]
    parts += [f"{k} [{lo:g}, {hi:g}]{' log' if log else ''}" for k, (lo, hi, log)
              in ranges.items()]
    return ", ".join(parts)
