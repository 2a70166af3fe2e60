"""dmlsearch's recipes against the authors' code, step for step (issue 32, reference traces).

Each fixture in ``fixtures/reference_traces/`` is what the authors' own code did on a tiny fixed
setup (recorded by ``python -m benchmarks.reference_traces.record``; provenance in each file):
the loss of each optimiser step and checksums of every parameter and BN buffer before the first
step and after each one. Here dmlsearch trains the same network from the same weights on the
same batches through its public path: a :class:`TrialConfig` with the settings the shipped
spaces set for that recipe, ``pretrained`` a weights file holding the setup's trunk (so frozen BN
and the head warm-up are active), a :class:`Fitter`, the setup's embedding layer and proxies
loaded, ``fitter.train_epoch(batches)`` and ``fitter.finish_epoch()`` per epoch; and the numbers
must match to float tolerance (:class:`common.Tolerance`).

For each correction of issue 32 a "tells apart" check runs the recipe without it (BN trained,
no head warm-up, proxies at lr x 1, the old 1/B variant 2, ...) and requires a mismatch: the
trace can fail. Reads the fixtures only; a few seconds on 2 CPU cores.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from benchmarks.reference_traces import common
from benchmarks.reference_traces.common import Trace
from tests.trainables._traces import deterministic  # noqa: F401 (fixture)
from tests.trainables._traces import setup  # noqa: F401 (fixture)
from tests.trainables._traces import weights  # noqa: F401 (fixture)


def proxy_recipe(trace: Trace, weights: Path) -> dict[str, Any]:
    """The shipped ProxyAnchor / thesis-proxy recipe with the trace's arguments (the thesis and
    Proxy-Anchor train.py: --bn-freeze 1, --warm 1, AdamW, proxies at lr x 100, clip 10)."""
    a = trace.authors_args
    flat = {
        **common.dmlsearch_settings(weights, trace),
        "freeze_bn": "stats" if a["bn_freeze"] else "off",
        "head_warmup_epochs": a["warm"],
        "optimizer": a["optimizer"], "lr": a["lr"], "weight_decay": a["weight_decay"],
        "embedding_lr_mult": 1.0, "grad_clip": 10.0,
        "lr_schedule": "step", "lr_step_size": a["lr_decay_step"],
        "lr_gamma": a["lr_decay_gamma"],
        "loss.margin": a["mrg"], "loss.alpha": a["alpha"], "loss.lr_mult": 100.0,
    }
    if "variant" in a:
        flat.update({"loss": "thesis_proxy", "loss.variant": a["variant"]})
    else:
        flat["loss"] = "proxy_anchor"
    return flat


def ms_recipe(trace: Trace, weights: Path) -> dict[str, Any]:
    """The shipped MultiSimilarity recipe (AdamW 1e-4 / 1e-4, clip 10, frozen BN statistics)
    with the MS authors' loss values (thresh 0.5 = PML's base, scale_pos 2, scale_neg 50, the
    mining margin 0.1 = the miner's epsilon) and no head warm-up: the MS authors' trainer has
    none (the shipped space's head_warmup_epochs 1 is the thesis code's train.py, whose loop the
    proxy traces check; this trace tells the two apart, see WITHOUT)."""
    a = trace.authors_args
    return {
        **common.dmlsearch_settings(weights, trace),
        "loss": "multi_similarity", "loss.margin": 0.5,
        "loss.alpha": a["LOSSES.MULTI_SIMILARITY_LOSS.SCALE_POS"],
        "loss.beta": a["LOSSES.MULTI_SIMILARITY_LOSS.SCALE_NEG"], "loss.epsilon": 0.1,
        "freeze_bn": "stats", "head_warmup_epochs": 0,
        "optimizer": "adamw", "lr": a["SOLVER.BASE_LR"], "weight_decay": a["SOLVER.WEIGHT_DECAY"],
        "grad_clip": 10.0, "lr_schedule": "step", "lr_step_size": 1,
        "lr_gamma": a["SOLVER.GAMMA"],
    }


def run_dmlsearch(setup: common.Setup, flat: dict[str, Any], trace: Trace,
                  tweak: Callable[[Any], None] | None = None) -> common.Run:
    """dmlsearch's recipe ``flat`` on the setup, as many epochs and steps as ``trace``;
    ``tweak(fitter)``: a change made after construction."""
    return common.run_fitter(setup, flat, epochs=trace.epochs,
                             steps_per_epoch=trace.steps_per_epoch, prepare_fitter=tweak)


def _traces() -> list[str]:
    return sorted(p.stem for p in common.FIXTURES.glob("*.json"))


RECIPES: dict[str, Callable[[Trace, Path], dict[str, Any]]] = {
    "proxy_anchor": proxy_recipe,
    "proxy_anchor_decay": proxy_recipe,
    "thesis_proxy_v1": proxy_recipe,
    "thesis_proxy_v2": proxy_recipe,
    "multi_similarity": ms_recipe,
}


# ---- the fixtures -----------------------------------------------------------------------------
def test_fixtures_are_small_and_carry_their_provenance() -> None:
    files = list(common.FIXTURES.iterdir())
    assert sum(f.stat().st_size for f in files) < 2.5 * 2**20
    for name in RECIPES:
        trace = common.load_trace(name)
        p = trace.provenance
        assert p["repository"].startswith("https://github.com/")
        assert len(p["commit"]) == 40 and p["files"] and p["adaptations"] and p["torch"]
        assert len(trace.steps) == 6 and {s.epoch for s in trace.steps} == {0, 1}
        assert all(np.isfinite(s.loss) for s in trace.steps)


def test_every_recipe_has_its_fixture_recorded_on_the_stored_setup() -> None:
    assert set(_traces()) >= set(RECIPES)
    setup_hash = common.file_sha256(common.FIXTURES / common.SETUP_FILE)
    for name in RECIPES:  # a trace recorded on another setup.npz cannot match
        assert common.load_trace(name).provenance["setup_sha256"] == setup_hash, name


# ---- dmlsearch matches the authors ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_dmlsearch_trains_as_the_authors_code(name: str, setup: common.Setup,
                                              weights: Path) -> None:
    trace = common.load_trace(name)
    initial, steps = run_dmlsearch(setup, RECIPES[name](trace, weights), trace)
    problems = common.compare(trace, steps, initial)
    assert not problems, "\n".join(problems[:20])


# ---- each correction is seen by its trace -----------------------------------------------------
def _no_loss_weight_decay(fitter: Any) -> None:
    """Before issue 32 the loss's group had weight decay 0."""
    for group in fitter.optimizer.param_groups:
        if group.get("name") == "loss":
            group["weight_decay"] = 0.0


def _variant2_over_batch(fitter: Any) -> None:
    """Before issue 32 variant 2 divided the batch sum cos.T @ cos by B."""
    from dmlsearch.trainables.losses._class_weights import cosines
    from dmlsearch.trainables.losses._class_weights import log1p_sum_exp
    from dmlsearch.trainables.losses.proxy_anchor import proxy_pull_term

    crit = fitter.loss.criterion

    def loss_from(embeddings: torch.Tensor, labels: torch.Tensor,
                  weights: torch.Tensor) -> torch.Tensor:
        cos = cosines(embeddings, weights)
        g = cos.t() @ cos / cos.shape[0]
        others = ~torch.eye(g.shape[0], dtype=torch.bool)
        push = log1p_sum_exp(crit.alpha * (g + crit.margin), others, dim=1)
        return proxy_pull_term(cos, labels, alpha=crit.alpha, margin=crit.margin) + push.mean()

    crit.loss_from = loss_from


WITHOUT: list[tuple[str, str, dict[str, Any], Callable[[Any], None] | None]] = [
    # (trace, what is left out, settings changed, change after construction)
    ("proxy_anchor", "frozen BN (BN trains)", {"freeze_bn": "off"}, None),
    ("proxy_anchor", "BN affine trained after the warm-up", {"freeze_bn": "all"}, None),
    ("proxy_anchor", "the head warm-up", {"head_warmup_epochs": 0}, None),
    ("proxy_anchor", "the proxies' lr x 100", {"loss.lr_mult": 1.0}, None),
    ("proxy_anchor_decay", "weight decay of the proxies", {}, _no_loss_weight_decay),
    ("proxy_anchor", "gradient clipping", {"grad_clip": 0.0}, None),
    ("proxy_anchor", "the StepLR decay", {"lr_step_size": 10}, None),
    ("thesis_proxy_v2", "the unscaled batch sum (1/B)", {}, _variant2_over_batch),
    ("thesis_proxy_v2", "variant 2 (variant 1 run)", {"loss.variant": 1}, None),
    ("thesis_proxy_v1", "variant 1 (variant 2 run)", {"loss.variant": 2}, None),
    ("thesis_proxy_v2", "frozen BN (BN trains)", {"freeze_bn": "off"}, None),
    ("thesis_proxy_v2", "the head warm-up", {"head_warmup_epochs": 0}, None),
    ("thesis_proxy_v1", "the proxies' lr x 100", {"loss.lr_mult": 1.0}, None),
    ("multi_similarity", "frozen BN statistics (BN trains)", {"freeze_bn": "off"}, None),
    ("multi_similarity", "BN affine trained (set_bn_eval only)", {"freeze_bn": "all"}, None),
    ("multi_similarity", "no head warm-up in the MS trainer", {"head_warmup_epochs": 1}, None),
    ("multi_similarity", "the MS miner (epsilon 1: every pair)", {"loss.epsilon": 1.0}, None),
]


@pytest.mark.parametrize(("name", "left_out", "changes", "tweak"), WITHOUT,
                         ids=[f"{w[0]}-{w[1]}" for w in WITHOUT])
def test_the_trace_tells_the_recipe_without_it_apart(
    name: str, left_out: str, changes: dict[str, Any], tweak: Callable[[Any], None] | None,
    setup: common.Setup, weights: Path,
) -> None:
    trace = common.load_trace(name)
    flat = {**RECIPES[name](trace, weights), **changes}
    initial, steps = run_dmlsearch(setup, flat, trace, tweak)
    assert not common.compare(trace, None, initial), "the same start is expected"
    problems = common.compare(trace, steps)
    assert problems, f"{name} without {left_out} still matches the authors' trace"
