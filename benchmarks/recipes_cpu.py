"""Benchmark: what issue #32's recipe corrections do where a CPU can measure them.

There are no ImageNet weights and no CUB here, so the published-accuracy claims stay open. What a
CPU can show, each over several seeds (medians and ranges; every arm in the same process):

1. **push**: the thesis proxy loss, variant 2, at the thesis code's setting (alpha 32, margin 0.1,
   batch 180, 100 proxies, 512-d; random unit embeddings and proxies): the spread (std) of the
   push term's exponents and the push term's share of the proxies' gradient norm, for the
   thesis's function (the batch sum, as its code) and for the old reading (the sum / B).
2. **scratch**: ``freeze_bn`` and ``head_warmup_epochs`` leave a trunk trained from scratch
   unchanged (``pretrained: none``): validation MAP@R of the same seeds with and without them on
   the built-in glyphs (smallcnn, ProxyAnchor); equal to the last digit by construction.
3. **thesis_proxy**: the thesis proxy loss, variant 2, trained on glyphs (smallcnn from scratch,
   6 epochs, gradients clipped at 10 as the thesis code does): best validation MAP@R of the
   thesis's function against the old 1/B reading.
4. **transfer**: a trunk "pretrained" on another dataset (smallcnn trained on the Omniglot sample,
   NormSoftmax) fine-tuned with ProxyAnchor on glyphs: the authors' recipe (BN statistics frozen,
   one epoch of head-only warm-up), each alone, and the same trunk with BN training and no
   warm-up; and a trunk from scratch. A
   small, grayscale stand-in for ImageNet -> CUB; it says whether the corrections help a
   pretrained trunk at all, not by how much on CUB.

    python benchmarks/recipes_cpu.py --omniglot ../shared/data/omniglot_background_small1.zip \
        --seeds 5 --out benchmarks/results/recipes_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.fit import Fitter
from dmlsearch.trainables.losses import thesis_proxy
from dmlsearch.trainables.losses._class_weights import cosines
from dmlsearch.trainables.losses._class_weights import log1p_sum_exp
from dmlsearch.trainables.losses.proxy_anchor import proxy_pull_term
from dmlsearch.trainables.trial import load_for
from dmlsearch.trainables.trial import splits_for

GLYPHS: dict[str, Any] = {
    "dataset": "glyphs", "backbone": "smallcnn", "protocol": "fixed", "val_ratio": 0.2,
    "embedding_size": 64, "batch_size": 64, "batch_sampler": "random", "optimizer": "adamw",
    "lr": 1e-3, "lr_schedule": "step", "lr_step_size": 4, "lr_gamma": 0.5, "epochs": 6,
    "metric": "map@r", "device": "cpu", "threads": 2,
}


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# ---- 1. push ----------------------------------------------------------------------------------
def _push_terms(cos: torch.Tensor, *, alpha: float, margin: float, per_batch: bool
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the push exponents off the diagonal, the push term) of variant 2 from B x C cosines."""
    g = cos.t() @ cos
    if per_batch:
        g = g / cos.shape[0]
    others = ~torch.eye(g.shape[0], dtype=torch.bool)
    z = alpha * (g + margin)
    return z[others], log1p_sum_exp(z, others, dim=1).mean()


def push(seeds: int) -> dict[str, Any]:
    rows: dict[str, list[float]] = {"spread_sum": [], "spread_mean": [], "share_sum": [],
                                    "share_mean": []}
    for seed in range(seeds):
        g = torch.Generator().manual_seed(seed)
        emb = torch.nn.functional.normalize(torch.randn(180, 512, generator=g), dim=1)
        labels = torch.randint(0, 100, (180,), generator=g)
        for name, per_batch in (("sum", False), ("mean", True)):
            weights = torch.randn(100, 512, generator=g).requires_grad_()
            cos = cosines(emb, weights)
            z, push_term = _push_terms(cos, alpha=32.0, margin=0.1, per_batch=per_batch)
            pull = proxy_pull_term(cos, labels, alpha=32.0, margin=0.1)
            (push_grad,) = torch.autograd.grad(push_term, weights, retain_graph=True)
            (pull_grad,) = torch.autograd.grad(pull, weights)
            rows[f"spread_{name}"].append(float(z.detach().std()))
            rows[f"share_{name}"].append(
                float(push_grad.norm() / (push_grad.norm() + pull_grad.norm())))
    return {"what": "variant 2 at alpha 32, margin 0.1, B 180, C 100, d 512 (random): std of "
                    "the push exponents alpha(g + margin) and the push term's share of the "
                    "proxies' gradient norm; sum = the thesis's (its code's cos.T @ cos), "
                    "mean = the old reading (/ B)",
            **{k: _summary(v) for k, v in rows.items()}}


# ---- fits ----------------------------------------------------------------------------------------
def _fit(settings: dict[str, Any], seed: int) -> float:
    cfg = TrialConfig.from_flat({**GLYPHS, **settings, "seed": seed})
    dataset = load_for(cfg)
    split = splits_for(cfg, dataset)[0]
    fitter = Fitter(cfg, dataset.images.select_classes(split.train_classes),
                    dataset.images.select_classes(split.val_classes), seed=seed, keep_best=False)
    result = fitter.run()
    assert result.best_value is not None
    return float(result.best_value)


class _PerBatchMean(thesis_proxy.ThesisProxyLoss):
    """The old reading of variant 2, for comparison only: the batch sum divided by B."""

    def loss_from(self, embeddings: torch.Tensor, labels: torch.Tensor,
                  weights: torch.Tensor) -> torch.Tensor:
        cos = cosines(embeddings, weights)
        _, push_term = _push_terms(cos, alpha=self.alpha, margin=self.margin, per_batch=True)
        return proxy_pull_term(cos, labels, alpha=self.alpha, margin=self.margin) + push_term


def paired(arms: dict[str, dict[str, Any]], seeds: int, *, swap: dict[str, type] | None = None
           ) -> dict[str, Any]:
    """Best validation MAP@R of each arm over the same seeds; per-seed differences to the first."""
    scores: dict[str, list[float]] = {name: [] for name in arms}
    for seed in range(seeds):
        for name, settings in arms.items():
            cls = (swap or {}).get(name)
            original = thesis_proxy.ThesisProxyLoss
            if cls is not None:  # the old function, put where the registry builds the loss
                thesis_proxy.ThesisProxyLoss = cls  # type: ignore[misc]
            try:
                scores[name].append(_fit(settings, seed))
            finally:
                thesis_proxy.ThesisProxyLoss = original  # type: ignore[misc]
    first = next(iter(arms))
    out: dict[str, Any] = {name: {"settings": arms[name], "map_at_r": scores[name],
                                  **_summary(scores[name])} for name in arms}
    for name in list(arms)[1:]:
        diffs = [a - b for a, b in zip(scores[first], scores[name])]
        out[f"{first} - {name}"] = {**_summary(diffs),
                                    "first_better": sum(d > 0 for d in diffs), "seeds": seeds}
    return out


def pretrain(omniglot: str, folder: Path, epochs: int) -> tuple[str, float]:
    """smallcnn trained on the Omniglot sample's training classes (NormSoftmax); its trunk file."""
    cfg = TrialConfig.from_flat({**GLYPHS, "dataset": "omniglot", "data_root": omniglot,
                                 "image_size": 32, "loss": "norm_softmax", "epochs": epochs,
                                 "lr_step_size": epochs})
    started = time.perf_counter()
    dataset = load_for(cfg)
    fitter = Fitter(cfg, dataset.train(), None, seed=0, keep_best=False)
    model = fitter.run().model
    path = folder / "smallcnn_omniglot.pt"
    torch.save(model.trunk.state_dict(), path)
    return str(path), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--omniglot", required=True, help="omniglot_background_small1.zip")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--pretrain-epochs", type=int, default=6)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(2)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "torch": torch.__version__, "python": platform.python_version()},
        "seeds": args.seeds,
        "push": push(args.seeds),
    }
    pa = {"loss": "proxy_anchor"}
    result["scratch"] = paired({
        "recipe": {**pa, "freeze_bn": "stats", "head_warmup_epochs": 1},
        "plain": {**pa, "freeze_bn": "off", "head_warmup_epochs": 0}}, args.seeds)
    tp = {"loss": "thesis_proxy", "loss.variant": 2, "grad_clip": 10.0}  # clipping: thesis code
    result["thesis_proxy"] = paired({"sum": tp, "mean_over_batch": tp}, args.seeds,
                                    swap={"mean_over_batch": _PerBatchMean})
    with tempfile.TemporaryDirectory() as tmp:
        trunk, seconds = pretrain(args.omniglot, Path(tmp), args.pretrain_epochs)
        result["pretrain_seconds"] = seconds
        result["transfer"] = paired({
            "recipe": {**pa, "pretrained": trunk, "freeze_bn": "stats", "head_warmup_epochs": 1},
            "bn_trains_no_warmup": {**pa, "pretrained": trunk, "freeze_bn": "off",
                                    "head_warmup_epochs": 0},
            "bn_frozen_only": {**pa, "pretrained": trunk, "freeze_bn": "stats"},
            "warmup_only": {**pa, "pretrained": trunk, "head_warmup_epochs": 1},
            "from_scratch": pa}, args.seeds)
    result["seconds"] = time.perf_counter() - started
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1,
                     default=lambda x: round(x, 4) if isinstance(x, float) else x)[:6000])


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
