"""MultiSimilarity's reference trace: the MS authors' loss (mining inside) and their trainer.

From msight-tech/research-ms-loss: ``ret_benchmark/losses/multi_similarity_loss.py``'s
``MultiSimilarityLoss`` (its hard mining is inside the loss: negatives with
``s + margin > min(positives)``, positives with ``s - margin < max(negatives)``, positives with
``s >= 1 - 1e-5`` dropped, an anchor left out when either mined set is empty, the sum over
anchors divided by the batch size), their optimiser builder (``solver/build.py``
``build_optimizer``: one group per trainable parameter, ``torch.optim.<OPTIMIZER_NAME>(...,
lr=BASE_LR, weight_decay=WEIGHT_DECAY)``), their schedule (``solver/lr_scheduler.py``
``WarmupMultiStepLR``, stepped before every iteration) and ``utils/freeze_bn.py``
``set_bn_eval``, all imported from the checkout; their loop (``engine/trainer.py`` ``do_train``)
is performed step by step in :func:`record`, each step commented with its line.

Values: the loss's own are the authors' (``thresh`` 0.5 and mining ``margin`` 0.1, hard-coded
in the loss; ``SCALE_POS`` 2 their default; ``SCALE_NEG`` 50, the paper's and dmlsearch's beta,
where their config default is 40). The optimiser is what dmlsearch's shipped MultiSimilarity
space uses (the thesis code's): AdamW, lr 1e-4, weight decay 1e-4, given to *their* builder as
``OPTIMIZER_NAME: AdamW`` (their example config: Adam, 3e-5, 5e-4); the schedule halves the lr
after 3 iterations (``STEPS: [4]``, ``GAMMA: 0.5``, no warm-up: their example's
``WARMUP_ITERS: 0``), which is dmlsearch's StepLR(1, 0.5) over 2 epochs of 3 steps. Their
trainer does not clip gradients; each step records the largest |gradient|.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import torch

from benchmarks.reference_traces import common
from benchmarks.reference_traces.common import Setup
from benchmarks.reference_traces.common import Step
from benchmarks.reference_traces.common import Trace

OPTION = "--ms"
REPOSITORY = "msight-tech/research-ms-loss"
COMMIT = "b68507d4e22d8a6d3d3c0e6c31be708f9dcd20ee"

EPOCHS, STEPS_PER_EPOCH = 2, 3
#: The authors' config keys the trace sets (ret_benchmark/config/defaults.py names).
CONFIG: dict[str, Any] = {
    "LOSSES.NAME": "ms_loss",
    "LOSSES.MULTI_SIMILARITY_LOSS.SCALE_POS": 2.0,
    "LOSSES.MULTI_SIMILARITY_LOSS.SCALE_NEG": 50.0,
    "SOLVER.OPTIMIZER_NAME": "AdamW",
    "SOLVER.BASE_LR": 1e-4,
    "SOLVER.WEIGHT_DECAY": 1e-4,
    "SOLVER.STEPS": [4],
    "SOLVER.GAMMA": 0.5,
    "SOLVER.WARMUP_FACTOR": 0.01,
    "SOLVER.WARMUP_ITERS": 0,
    "SOLVER.WARMUP_METHOD": "linear",
    "MODEL.HEAD.DIM": common.EMBEDDING_SIZE,
    "DATA.TRAIN_BATCHSIZE": common.BATCH_SIZE,
    "DATA.NUM_INSTANCES": common.IMAGES_PER_CLASS,
}


def _cfg() -> types.SimpleNamespace:
    """Their yacs config as plain attributes (only the keys their code reads here)."""
    root = types.SimpleNamespace()
    for key, value in CONFIG.items():
        node = root
        *path, leaf = key.split(".")
        for part in path:
            if not hasattr(node, part):
                setattr(node, part, types.SimpleNamespace())
            node = getattr(node, part)
        setattr(node, leaf, value)
    return root


def _import(checkout: Path) -> dict[str, Any]:
    sys.path.insert(0, str(checkout))
    try:
        return {
            "loss": importlib.import_module("ret_benchmark.losses.multi_similarity_loss"),
            "solver": importlib.import_module("ret_benchmark.solver.build"),
            "freeze_bn": importlib.import_module("ret_benchmark.utils.freeze_bn"),
        }
    finally:
        sys.path.remove(str(checkout))


def _mined(feats: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
    """How many anchors their loss keeps and drops at this step (diagnostics only: the same
    tests as multi_similarity_loss.py:33-42, recomputed here without gradient)."""
    with torch.no_grad():
        sim = feats @ feats.t()
        kept, half = 0, 0
        for i in range(len(labels)):
            pos_ = sim[i][labels == labels[i]]
            pos_ = pos_[pos_ < 1 - 1e-5]
            neg_ = sim[i][labels != labels[i]]
            neg = neg_[neg_ + 0.1 > pos_.min()]
            pos = pos_[pos_ - 0.1 < neg_.max()]
            if len(neg) and len(pos):
                kept += 1
            elif len(neg) or len(pos):
                half += 1  # one mined set empty: their loss skips the anchor
        return {"anchors_kept": kept, "anchors_skipped_with_pairs": half}


def record(checkout: Path, setup: Setup) -> list[Trace]:
    mods = _import(checkout)
    cfg = _cfg()
    model = common.build_network(setup)
    criterion = mods["loss"].MultiSimilarityLoss(cfg)  # losses/build.py:17 LOSS[name](cfg)
    optimizer = mods["solver"].build_optimizer(cfg, model)  # tools/main.py:31
    scheduler = mods["solver"].build_lr_scheduler(cfg, optimizer)  # tools/main.py:32
    set_bn_eval = mods["freeze_bn"].set_bn_eval
    emb_ids = {id(p) for p in model.embedding.parameters()}

    def lrs() -> dict[str, float]:
        out = {}
        for g in optimizer.param_groups:
            name = "embedding" if id(g["params"][0]) in emb_ids else "backbone"
            out.setdefault(name, g["lr"])
        return out

    def sums() -> dict[str, list[float]]:
        return common.model_checksums(model)

    initial = sums()
    steps: list[Step] = []
    batches = [b for epoch in setup.batches(EPOCHS, STEPS_PER_EPOCH) for b in epoch]
    # engine/trainer.py:44: for iteration, (images, targets) in enumerate(train_loader, 0)
    for iteration, (images, targets) in enumerate(batches):
        # trainer.py:46-62: validation at iteration 0 (model.eval(), features extracted): no
        # state changes (eval-mode BN updates nothing); left out.
        model.train()  # trainer.py:64
        model.apply(set_bn_eval)  # trainer.py:65: every *BatchNorm* module in eval mode
        with warnings.catch_warnings():  # torch warns of step() before optimizer.step()
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step")
            scheduler.step()  # trainer.py:71: before the iteration's update
        feats = model(common.prepare(model, images))  # trainer.py:73, 76
        extra = _mined(feats.detach(), targets)
        loss = criterion(feats, targets)  # trainer.py:77
        optimizer.zero_grad()  # trainer.py:78
        loss.backward()  # trainer.py:79
        biggest = common.max_abs_grad(model.parameters())
        rates = lrs()
        optimizer.step()  # trainer.py:80
        steps.append(Step(epoch=iteration // STEPS_PER_EPOCH, step=iteration % STEPS_PER_EPOCH,
                          loss=float(loss.detach()), lr=rates, max_abs_grad=biggest,
                          after=sums(), extra=extra))
    skipped = sum(s.extra["anchors_skipped_with_pairs"] for s in steps)
    return [Trace(
        name="multi_similarity",
        description="MultiSimilarity with its mining (the MS authors' loss, mining inside), "
                    "their optimiser builder and schedule, BN in eval mode with trained affine "
                    "(set_bn_eval), no clipping, no warm-up; AdamW 1e-4 / 1e-4 (dmlsearch's "
                    "shipped space), lr halved after 3 iterations; 6 iterations.",
        provenance=common.provenance(
            repository=REPOSITORY, checkout=checkout, expected_commit=COMMIT,
            files=[checkout / "ret_benchmark" / p for p in (
                "losses/multi_similarity_loss.py", "solver/build.py", "solver/lr_scheduler.py",
                "utils/freeze_bn.py", "engine/trainer.py")],
            adaptations=[
                "Their yacs config is a plain namespace holding the keys their code reads "
                "(CONFIG in _multi_similarity.py; yacs not needed); the loss, "
                "build_optimizer, build_lr_scheduler and set_bn_eval are imported from the "
                "checkout unchanged.",
                "The network is the shared tiny setup (dmlsearch's smallcnn trunk + GAP+GMP "
                "summed + Linear + L2 norm) instead of their BNInception (which pools GMP "
                "only, modeling/backbone/bninception.py:506) and linear_norm head: the shipped "
                "space's head (the thesis code's). Its parameters are named trunk.* / "
                "embedding.*, so solver/build.py's lr_mul 0.1 for 'backbone' names is not "
                "set; lr_mul is never read by their code (only build.py:11-14 mention it), so "
                "no learning rate changes either way.",
                "engine/trainer.py's loop is performed by _multi_similarity.record in its "
                "order, each step commented with its line; the data loader is the setup's "
                "fixed batches (uint8 -> dmlsearch's prepare_input), the iteration-0 "
                "validation, logging and checkpointing are left out.",
                "CPU, fp32, 1 thread, torch.use_deterministic_algorithms(True).",
            ],
            command=f"python -m benchmarks.reference_traces.record --ms {checkout} --out DIR",
        ),
        authors_args=dict(CONFIG),
        initial=initial,
        steps=steps,
        notes=[
            f"the largest |gradient| met: {max(s.max_abs_grad for s in steps):.3g} (the "
            "shipped space's clip_grad_value_ 10 would "
            + ("change it" if max(s.max_abs_grad for s in steps) > 10 else "not act") + ")",
            f"anchors with one mined set empty (their loss skips them): {skipped} over the "
            "trace",
        ],
    )]
