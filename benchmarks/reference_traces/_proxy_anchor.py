"""Proxy-Anchor's reference trace: the authors' loss and their ``train.py`` procedure.

From tjddus9597/Proxy-Anchor-CVPR2020 (``code/``): the ``Proxy_Anchor`` class of ``losses.py``
is imported from the checkout and runs as is (on the CPU, :func:`common.cuda_as_cpu`); the
training loop exists only as the script ``train.py``, so :func:`run_train_py` performs its steps
in its order, each commented with the line it follows. The thesis code's ``train.py`` is the
same loop (it was derived from this one): ``_thesis_proxy.py`` runs it through
:func:`run_train_py` too, with its own line numbers.

The trace (``proxy_anchor.json``): 2 epochs x 3 steps on the shared setup with the settings of
the authors' CUB/CARS commands that matter here: ``--bn-freeze 1``, ``--warm 1`` (epoch 1 trains
the embedding layer and the proxies only; at epoch 2 every parameter, BN affine included, is
re-enabled while BN stays in eval mode), AdamW ``--lr 1e-4 --weight-decay 1e-4`` (proxies at
lr x 100), ``clip_grad_value_`` 10, ``--alpha 32 --mrg 0.1``; ``--lr-decay-step 1`` (their
default is 10) with their default ``--lr-decay-gamma 0.5`` so that the StepLR decay happens
inside the trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks.reference_traces import common
from benchmarks.reference_traces.common import Setup
from benchmarks.reference_traces.common import Step
from benchmarks.reference_traces.common import Trace

OPTION = "--proxy-anchor"
REPOSITORY = "tjddus9597/Proxy-Anchor-CVPR2020"
COMMIT = "51db57031e38f75c03f69bbdfad1a3233afd9787"

EPOCHS, STEPS_PER_EPOCH = 2, 3
#: The authors' train.py arguments the trace runs with (their names).
ARGS: dict[str, Any] = {
    "loss": "Proxy_Anchor", "optimizer": "adamw", "lr": 1e-4, "weight_decay": 1e-4,
    "lr_decay_step": 1, "lr_decay_gamma": 0.5, "alpha": 32.0, "mrg": 0.1, "warm": 1,
    "bn_freeze": 1, "sz_embedding": common.EMBEDDING_SIZE, "sz_batch": common.BATCH_SIZE,
    "epochs": EPOCHS, "l2_norm": 1,
}
CLIP = 10  # train.py:298 and :300 clip_grad_value_(..., 10)


@dataclasses.dataclass(frozen=True)
class Lines:
    """Where each step of the loop is in one ``train.py`` (and its ``net/bn_inception.py``)."""

    file: str
    bn_freeze_ctor: str
    groups: str
    proxy_group: str
    optimizer: str
    scheduler: str
    train_mode: str
    bn_eval: str
    warm: str
    forward: str
    loss: str
    zero_grad: str
    backward: str
    clip: str
    step: str
    scheduler_step: str


PA_LINES = Lines(
    file="code/train.py", bn_freeze_ctor="code/net/bn_inception.py:34-39",
    groups="code/train.py:236-240", proxy_group="code/train.py:241-242",
    optimizer="code/train.py:253-254", scheduler="code/train.py:256",
    train_mode="code/train.py:265", bn_eval="code/train.py:266-271",
    warm="code/train.py:276-287", forward="code/train.py:292", loss="code/train.py:293",
    zero_grad="code/train.py:295", backward="code/train.py:296",
    clip="code/train.py:298-300", step="code/train.py:303", scheduler_step="code/train.py:313",
)

ADAPTATIONS_TRAIN_PY = [
    "The network is the shared tiny setup (dmlsearch's smallcnn trunk + GAP+GMP summed + "
    "Linear + L2 norm, common.build_network) instead of their pretrained BNInception; their "
    "`model.model.embedding` is its `.embedding`, their `model.model.modules()` its "
    "`.modules()`; the initial weights and proxies are the setup's (their constructors' "
    "random draws are replaced).",
    "train.py is a script (argparse, wandb, datasets, evaluation): its training steps are "
    "performed by benchmarks/reference_traces/_proxy_anchor.py:run_train_py in its order, each "
    "commented with the line it follows; data loading is replaced by the setup's fixed "
    "batches (uint8 -> dmlsearch's prepare_input), evaluation and checkpointing are left out.",
    "The first parameter group, list(set(all) - set(embedding)), is taken in the module's "
    "parameter order (a set's order is arbitrary; AdamW updates each tensor alone, so the "
    "order does not change any number).",
    "CPU instead of CUDA: every .cuda() of their code returns its object unchanged "
    "(common.cuda_as_cpu); fp32, 1 thread, torch.use_deterministic_algorithms(True).",
]


def code_dir(checkout: Path) -> Path:
    """The folder holding ``train.py`` and ``losses.py`` (``code/`` in Proxy-Anchor's repo)."""
    return checkout / "code" if (checkout / "code" / "losses.py").is_file() else checkout


def run_train_py(
    setup: Setup, criterion: nn.Module, proxies: nn.Parameter, *, args: dict[str, Any],
    lines: Lines, epochs: int = EPOCHS, steps_per_epoch: int = STEPS_PER_EPOCH,
    diagnose: Callable[[torch.Tensor, torch.Tensor], dict[str, Any]] | None = None,
) -> tuple[dict[str, list[float]], list[Step]]:
    """Proxy-Anchor's ``train.py`` training steps with ``criterion`` (an authors' loss object
    holding ``proxies``, already set to the setup's) on the setup's network and batches.
    Returns the initial checksums and the steps. ``diagnose(embeddings, labels)``: extra numbers
    recorded with each step (computed without gradient)."""
    model = common.build_network(setup)
    # The model's constructor (lines.bn_freeze_ctor), `if bn_freeze:` BatchNorm2d modules put
    # in eval mode and their weight and bias set requires_grad False.
    if args["bn_freeze"]:
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
                m.weight.requires_grad_(False)
                m.bias.requires_grad_(False)
    embedding = list(model.embedding.parameters())
    # lines.groups: every model parameter but the embedding layer's (at the optimizer's lr),
    # then the embedding layer at lr * 1.
    head = {id(p) for p in embedding}
    param_groups: list[dict[str, Any]] = [
        {"params": [p for p in model.parameters() if id(p) not in head]},
        {"params": embedding, "lr": float(args["lr"]) * 1},
    ]
    # lines.proxy_group: the proxies at lr * 100.
    param_groups.append({"params": [proxies], "lr": float(args["lr"]) * 100})
    # lines.optimizer: AdamW(param_groups, lr=args.lr, weight_decay=args.weight_decay).
    assert args["optimizer"] == "adamw"
    opt = torch.optim.AdamW(param_groups, lr=float(args["lr"]), weight_decay=args["weight_decay"])
    # lines.scheduler: StepLR(opt, step_size=args.lr_decay_step, gamma=args.lr_decay_gamma).
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=args["lr_decay_step"],
                                                gamma=args["lr_decay_gamma"])
    group_names = ("backbone", "embedding", "loss")

    def sums() -> dict[str, list[float]]:
        return common.model_checksums(model, {"proxies": proxies})

    initial = sums()
    batches = setup.batches(epochs, steps_per_epoch)
    steps: list[Step] = []
    for epoch in range(epochs):
        model.train()  # lines.train_mode
        if args["bn_freeze"]:  # lines.bn_eval: every BatchNorm2d of the model in eval mode
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()
        # lines.warm: with warm > 0, the parameters other than the embedding layer's and the
        # criterion's are set requires_grad False at epoch 0 and True at epoch == warm (BN's
        # weight and bias included).
        if args["warm"] > 0:
            unfreeze = {id(p) for p in embedding + list(criterion.parameters())}
            others = [p for p in model.parameters() if id(p) not in unfreeze]
            if epoch == 0:
                for p in others:
                    p.requires_grad = False
            if epoch == args["warm"]:
                for p in others:
                    p.requires_grad = True
        for step, (x, y) in enumerate(batches[epoch]):
            with common.cuda_as_cpu():
                m = model(common.prepare(model, x.squeeze()))  # lines.forward
                loss = criterion(m, y.squeeze())  # lines.loss
            opt.zero_grad()  # lines.zero_grad
            loss.backward()  # lines.backward
            every = list(model.parameters()) + list(criterion.parameters())
            biggest = common.max_abs_grad(every)
            # lines.clip: clip_grad_value_(model.parameters(), 10), then the criterion's.
            torch.nn.utils.clip_grad_value_(model.parameters(), CLIP)
            torch.nn.utils.clip_grad_value_(criterion.parameters(), CLIP)
            value = float(loss.detach())
            lrs = {name: g["lr"] for name, g in zip(group_names, opt.param_groups)}
            opt.step()  # lines.step
            extra = {} if diagnose is None else diagnose(m.detach(), y)
            steps.append(Step(epoch=epoch, step=step, loss=value, lr=lrs,
                              max_abs_grad=biggest, after=sums(), extra=extra))
        scheduler.step()  # lines.scheduler_step: after the epoch
    return initial, steps


def load_losses(checkout: Path, name: str, patches=()):  # type: ignore[no-untyped-def]
    """The authors' ``losses.py`` of ``checkout`` as a module (their ``.cuda()`` calls are made
    harmless where they run, by :func:`common.cuda_as_cpu`)."""
    return common.import_file(code_dir(checkout) / "losses.py", name, patches)


#: The second trace's arguments: a weight decay large enough to be seen. With their default
#: 1e-4 the proxies' decoupled decay (lr x 100 x weight_decay = 1e-6 of their value per step)
#: moves them by 6e-6 over the trace: under the tolerance (common.Tolerance), so that trace
#: cannot tell whether the proxies get weight decay; at 1e-2 it is 1e-4 per step.
DECAY_ARGS: dict[str, Any] = {**ARGS, "weight_decay": 1e-2}


def record(checkout: Path, setup: Setup) -> list[Trace]:
    return [_record(checkout, setup, "proxy_anchor", ARGS, ""),
            _record(checkout, setup, "proxy_anchor_decay", DECAY_ARGS,
                    " With --weight-decay 1e-2 (their default 1e-4) so that the proxies' "
                    "weight decay shows.")]


def _record(checkout: Path, setup: Setup, name: str, args: dict[str, Any], more: str) -> Trace:
    code = code_dir(checkout)
    losses = load_losses(checkout, f"{name}_authors_losses")
    with common.cuda_as_cpu():
        criterion = losses.Proxy_Anchor(nb_classes=common.NUM_CLASSES,
                                        sz_embed=args["sz_embedding"], mrg=args["mrg"],
                                        alpha=args["alpha"])
    with torch.no_grad():
        criterion.proxies.copy_(setup.proxies())
    initial, steps = run_train_py(setup, criterion, criterion.proxies, args=args,
                                  lines=PA_LINES)
    clipped = [i + 1 for i, s in enumerate(steps) if s.max_abs_grad > CLIP]
    trace = Trace(
        name=name,
        description="Proxy-Anchor (losses.py Proxy_Anchor, train.py's loop): frozen BN "
                    "(eval mode; affine frozen in epoch 1 by the warm-up, trained in epoch 2), "
                    "head warm-up 1 epoch, proxies at lr x 100, AdamW with weight decay on every "
                    "group, clip_grad_value_ 10, StepLR per epoch; 2 epochs x 3 steps." + more,
        provenance=common.provenance(
            repository=REPOSITORY, checkout=checkout, expected_commit=COMMIT,
            files=[code / "losses.py", code / "train.py", code / "net" / "bn_inception.py"],
            adaptations=ADAPTATIONS_TRAIN_PY + [
                "losses.py is imported from the checkout unchanged; Proxy_Anchor's proxies are "
                "overwritten with the setup's after construction.",
            ],
            command="python -m benchmarks.reference_traces.record --proxy-anchor "
                    f"{checkout} --out DIR",
        ),
        authors_args=dict(args),
        initial=initial,
        steps=steps,
        notes=[
            f"gradient clipping at {CLIP} changed the gradients at steps {clipped}"
            if clipped else
            f"no gradient exceeded {CLIP} (the largest: "
            f"{max(s.max_abs_grad for s in steps):.3g}): clipping is a no-op on this trace",
        ],
    )
    return trace
