"""E2E's reference traces: the authors' Cifar-10 training step (learned distance D + AM-softmax).

From joaomonteirof/e2e_verification, ``cifar/``: ``train_loop.py`` (``TrainLoop.train_step``,
run as it is), ``harvester.py`` (``AllTripletSelector``), ``models/losses.py`` (``AMSoftmax``,
``LabelSmoothingLoss``) and ``models/resnet.py`` (D: ``ResNet.make_bin_layers`` and
``ResNet.forward_bin``), imported from the checkout. ``train.py`` (the script: SGD with momentum
and weight decay on ``model.parameters()``, i.e. on the encoder, the AM-softmax weights and D
alike) is performed here, line by line, because it downloads Cifar-10 and needs a GPU.

What their step does (``train_loop.py:164-203``): the encoder's raw output ``e`` (the ResNet's
512-d average-pooled features: no embedding layer, no normalisation); AM-softmax (m 0.35, s 30)
on ``e / |e|`` with label smoothing (``LabelSmoothingLoss``, ε on the other classes spread as
ε/(10-1)); every triplet (a, p, n) of the batch (``AllTripletSelector``: (a, p) every
*combination* of two same-class positions, a < p, times every negative n); D (Linear 2d->h,
LeakyReLU 0.1, more Linear/LeakyReLU, Dropout, Linear h->1, Sigmoid) on the raw rows [e_a, e_p]
(target U(1-ε/2, 1)) and [e_a, e_n] (target U(0, ε/2)); BCE averaged over all those rows; the
loss is CE + BCE, weight 1:1; no gradient clipping in ``cifar/`` (``asv/`` and ``imagenet/``
clip the gradient norm).

What dmlsearch's E2E loss does (``trainables/losses/e2e.py``): D on *every ordered pair* (i, j),
i != j, ½ mean over positive + ½ mean over negative pairs, targets 1-ε/4 and ε/4 (the means of
the authors' draws), on the model's L2-normalised embedding times ``loss.d_input_norm``.

What can be matched, and the traces (each 1 epoch x 8 steps on the shared setup; its batches
hold 4 classes x 3 images):

- The encoder: their D sees the raw features, whose norm varies from image to image; dmlsearch's
  model always L2-normalises its output (``EmbeddingNet.forward``) and the loss sees only that,
  so D sees vectors of norm ``d_input_norm`` exactly. No setting of dmlsearch gives D the
  unnormalised features, so the traces give the authors' step an encoder whose raw output is
  ``d_input_norm`` x the shared network's L2-normalised embedding (``d_input_norm`` = 4 =
  sqrt(16), dmlsearch's default for 16 dimensions). Then AM-softmax sees the same unit vectors
  on both sides and D the same inputs: what is compared is the loss, D, the pairs, the weights,
  the label smoothing and the optimiser; not how the encoder's raw features would move.
- D's dropout draws masks in a layout (one row per triplet) that dmlsearch (one per ordered
  pair, on a B x B grid) cannot reproduce: the traces use dropout 0.
- The smoothed BCE targets are random draws (``torch.rand`` at ``train_loop.py:192``); BCE is
  linear in its target, so dmlsearch uses their means; the traces run line 192 with
  ``torch.full(.., 0.5)`` in place of ``torch.rand`` (the draws' mean), and a third trace uses
  label smoothing 0, where line 192 gives exact 0/1 targets and needs no change.
- The pairs: for a batch with k images of each class, dmlsearch's pair loss is the *mean of the
  authors' over the k! orders in which each class's images can stand in the batch* (their
  loader shuffles, so the order is random): each unordered positive pair enters in either order
  and anchor a's negatives weigh (number of a's positives after a), whose mean is (k-1)/2 for
  every image. Step for step on one order they differ. So:

  - ``e2e_step``: their ``train_step`` as it is, on the batch in its given order. dmlsearch does
    *not* match it (the test says by how much; it is an expected failure).
  - ``e2e_orders``: their ``train_step`` with their ``AllTripletSelector`` called on the batch
    in each of the 3! within-class orders (the same permutation applied to every class; the
    classes' triplets are independent, so this is the mean over all (3!)^4 joint orders) and the
    triplets pooled, so line 197's mean is the mean over the orders. dmlsearch must match it.
  - ``e2e_orders_ls0``: the same with label smoothing 0 (no change to line 192 needed).
  - ``e2e_orders_unequal``: as ``e2e_orders`` (4 steps) on batches cut to classes of 3, 3, 2
    and 1 images. With classes of unequal size in a batch (``batch_sampler: random``, as
    ``e2e_cifar10``), even the mean over orders differs from dmlsearch's: the authors weigh a
    positive pair by the number of negatives of its class in the batch, and a negative pair
    (i, j) by (k_i - 1)/2; dmlsearch weighs all positive pairs alike and all negative pairs
    alike. dmlsearch does not match it (an expected failure).
"""

from __future__ import annotations

import importlib
import itertools
import math
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks.reference_traces import common
from benchmarks.reference_traces._memvir import authors_imports
from benchmarks.reference_traces.common import LinePatch
from benchmarks.reference_traces.common import Setup
from benchmarks.reference_traces.common import Step
from benchmarks.reference_traces.common import Trace

OPTION = "--e2e"
REPOSITORY = "joaomonteirof/e2e_verification"
COMMIT = "867f7a2fbdb2ac9154c31e1e63762b9a58b32d7e"

EPOCHS, STEPS_PER_EPOCH = 1, 8
#: D's input scale on both sides (see the module docstring): sqrt(EMBEDDING_SIZE).
D_INPUT_NORM = math.sqrt(common.EMBEDDING_SIZE)
#: train.py's arguments (their names): the paper's chosen Cifar-10 configuration (App. A.2.1)
#: but D's width (350 -> 16, to keep the fixture small) and dropout (0.2 -> 0, see above).
ARGS: dict[str, Any] = {
    "lr": 0.01, "l2": 1e-3, "momentum": 0.9, "smoothing": 0.2, "softmax": "am_softmax",
    "n_hidden": 3, "hidden_size": 16, "dropout_prob": 0.0, "batch_size": common.BATCH_SIZE,
}
AM_MARGIN, AM_SCALE = 0.35, 30.0  # models/losses.py:11 AMSoftmax defaults (ResNet passes none)

_THEIR_PACKAGES = ("models", "harvester", "utils")

# train_loop.py lines run changed (common.LinePatch: the text must be the commit's).
_LABEL_SET = LinePatch(
    41, "self.ce_criterion = LabelSmoothingLoss(label_smoothing, lbl_set_size=10)",
    f"self.ce_criterion = LabelSmoothingLoss(label_smoothing, "
    f"lbl_set_size={common.NUM_CLASSES})")
_MEAN_TARGETS = LinePatch(
    192,
    "y_ = torch.cat([torch.rand(emb_ap.size(0))*self.disc_label_smoothing+(1.0-self.disc_label_"
    "smoothing), torch.rand(emb_an.size(0))*self.disc_label_smoothing],0) if isinstance(self.ce_"
    "criterion, LabelSmoothingLoss) else torch.cat([torch.ones(emb_ap.size(0)), torch.zeros(emb_"
    "an.size(0))],0)",
    "y_ = torch.cat([torch.full((emb_ap.size(0),), 0.5)*self.disc_label_smoothing+(1.0-self.disc_"
    "label_smoothing), torch.full((emb_an.size(0),), 0.5)*self.disc_label_smoothing],0) if "
    "isinstance(self.ce_criterion, LabelSmoothingLoss) else torch.cat([torch.ones(emb_ap.size(0))"
    ", torch.zeros(emb_an.size(0))],0)")

RUNS: dict[str, dict[str, Any]] = {
    "e2e_step": {
        "orders": False, "smoothing": 0.2,
        "description": "E2E Cifar-10 train_step as it is (batch in its given order): AM-softmax "
                       "(m 0.35, s 30) with label smoothing 0.2 + BCE of D (3 x 16, dropout 0) "
                       "over AllTripletSelector's triplets; SGD lr 0.01, momentum 0.9, weight "
                       "decay 1e-3 on every parameter (D included); 8 steps. dmlsearch's pair "
                       "loss is the mean over orders (e2e_orders), not this.",
    },
    "e2e_orders": {
        "orders": True, "smoothing": 0.2,
        "description": "E2E Cifar-10 train_step with the triplets of every within-class order "
                       "of the batch pooled (the mean of their BCE over the orders): AM-softmax "
                       "(m 0.35, s 30), label smoothing 0.2 (BCE targets at their means), D "
                       "3 x 16 with dropout 0, SGD lr 0.01, momentum 0.9, weight decay 1e-3 on "
                       "every parameter; 8 steps.",
    },
    "e2e_orders_unequal": {
        "orders": True, "smoothing": 0.2, "steps": 4, "keep": [0, 1, 2, 3, 4, 5, 6, 7, 9],
        "description": "As e2e_orders (4 steps) on batches whose classes have 3, 3, 2 and 1 "
                       "images: the mean over orders then weighs a positive pair by its "
                       "class's negatives and a negative pair (i, j) by (k_i - 1)/2, which "
                       "dmlsearch's equal weights do not.",
    },
    "e2e_orders_ls0": {
        "orders": True, "smoothing": 0.0,
        "description": "As e2e_orders with label smoothing 0 (plain cross-entropy, BCE targets "
                       "exactly 1 and 0: train_loop.py:192 needs no change).",
    },
}


def d_names() -> list[tuple[int, str, tuple[int, ...]]]:
    """D's linear layers: (index in their ModuleList and dmlsearch's Sequential, name, shape).
    Both lay D out as Linear, LeakyReLU, (Linear, LeakyReLU) x (n-1), Dropout, Linear(, Sigmoid),
    so the linear layers sit at the same indices."""
    d, h, n = common.EMBEDDING_SIZE, ARGS["hidden_size"], ARGS["n_hidden"]
    out = [(0, "distance.0", (h, 2 * d))]
    out += [(2 * i, f"distance.{2 * i}", (h, h)) for i in range(1, n)]
    out.append((2 * n + 1, f"distance.{2 * n + 1}", (1, h)))
    return out


def initial_d() -> dict[str, torch.Tensor]:
    """D's fixed initial weights and biases (weights ~ N(0, 1/fan_in), biases ~ N(0, 0.05²)),
    stored in the traces as ``initial_tensors``."""
    out = {}
    for _, name, shape in d_names():
        w = common.initial_tensor(f"e2e/{name}.weight", shape, init="normal")
        out[f"{name}.weight"] = (w / math.sqrt(shape[1])).contiguous()
        b = common.initial_tensor(f"e2e/{name}.bias", (shape[0],), init="normal")
        out[f"{name}.bias"] = (0.05 * b).contiguous()
    return out


class _Encoder(nn.Module):
    """Their model as ``train_step`` uses it: ``forward`` (the raw embedding: here D_INPUT_NORM x
    the shared network's L2-normalised output), ``out_proj`` (their AMSoftmax), ``classifier``
    (their D, from ResNet.make_bin_layers) and ``forward_bin`` (ResNet.forward_bin, bound)."""

    def __init__(self, net: nn.Module, out_proj: nn.Module, classifier: nn.Module,
                 forward_bin: Any) -> None:
        super().__init__()
        self.net, self.out_proj, self.classifier = net, out_proj, classifier
        self.forward_bin = types.MethodType(forward_bin, self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return D_INPUT_NORM * self.net(x)


class _EveryWithinClassOrder:
    """Their triplet selector applied to the batch presented in every within-class order, the
    triplets mapped back to the batch's positions and pooled.

    Class c (k_c images) has k_c! orders; the batch is presented L = lcm(k_c!) times, the i-th
    time with class c in its (i mod k_c!)-th order, so each class passes through each of its
    orders equally often. A class's triplets depend on its own order only, and their number
    not at all, so the mean over the pooled rows is the mean over all joint orders of the
    batch. (With 3 images of every class: L = 6, one permutation applied to every class.)"""

    def __init__(self, selector: Any) -> None:
        self.selector = selector
        self.orders_used = 0

    def get_triplets(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        y = labels.cpu().numpy()
        members = [np.flatnonzero(y == c) for c in np.unique(y)]
        perms = [list(itertools.permutations(range(len(m)))) for m in members]
        presentations = math.lcm(*(len(p) for p in perms))
        pooled = []
        for i in range(presentations):
            order = np.arange(len(y))  # order[p]: the batch index presented at position p
            for m, p in zip(members, perms):
                order[m] = m[list(p[i % len(p)])]
            order_t = torch.from_numpy(order)
            triplets = self.selector.get_triplets(embeddings[order_t], labels[order_t])
            pooled.append(order_t[triplets])
        self.orders_used = presentations
        return torch.cat(pooled)


def kept(batch: tuple[torch.Tensor, torch.Tensor], keep: list[int] | None
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` with only the positions ``keep`` (all when None)."""
    if keep is None:
        return batch
    index = torch.tensor(keep)
    return batch[0][index], batch[1][index]


def _record_run(train_loop: types.ModuleType, setup: Setup, *, orders: bool,
                smoothing: float, steps_per_epoch: int = STEPS_PER_EPOCH,
                keep: list[int] | None = None) -> tuple[dict[str, list[float]], list[Step]]:
    losses = sys.modules["models.losses"]
    resnet = sys.modules["models.resnet"]
    harvester = sys.modules["harvester"]
    net = common.build_network(setup)
    # models/resnet.py:136 (sm_type am_softmax): AMSoftmax(input_features, output_features).
    out_proj = losses.AMSoftmax(input_features=common.EMBEDDING_SIZE,
                                output_features=common.NUM_CLASSES)
    assert (out_proj.m, out_proj.s) == (AM_MARGIN, AM_SCALE)
    # models/resnet.py:140: D = make_bin_layers(n_in=2 x features, nh, n_h, dropout_prob)
    # (the method does not use self).
    classifier = resnet.ResNet.make_bin_layers(
        None, n_in=2 * common.EMBEDDING_SIZE, n_h_layers=ARGS["n_hidden"],
        h_size=ARGS["hidden_size"], dropout_p=ARGS["dropout_prob"])
    start = initial_d()
    with torch.no_grad():  # the setup's / the trace's initial tensors instead of their draws
        out_proj.w.copy_(setup.proxies().t())
        for index, name, _ in d_names():
            classifier[index].weight.copy_(start[f"{name}.weight"])
            classifier[index].bias.copy_(start[f"{name}.bias"])
    model = _Encoder(net, out_proj, classifier, resnet.ResNet.forward_bin)
    # train.py:88: SGD on model.parameters() (encoder, AM-softmax weights and D alike).
    optimizer = torch.optim.SGD(model.parameters(), lr=ARGS["lr"], weight_decay=ARGS["l2"],
                                momentum=ARGS["momentum"])
    # train.py:90: TrainLoop(model, optimizer, train_loader, valid_loader, patience=...,
    # label_smoothing=...); no loaders (train_step takes the batch), no checkpoints, CPU.
    trainer = train_loop.TrainLoop(model, optimizer, None, None, patience=10,
                                   label_smoothing=smoothing, verbose=-1, save_cp=False,
                                   cuda=False)
    if orders:
        trainer.harvester = _EveryWithinClassOrder(harvester.AllTripletSelector())

    def sums() -> dict[str, list[float]]:
        tensors: dict[str, torch.Tensor] = {"classifier.weight": out_proj.w.t()}
        for index, name, _ in d_names():
            tensors[f"{name}.weight"] = classifier[index].weight
            tensors[f"{name}.bias"] = classifier[index].bias
        return common.model_checksums(net, tensors)

    initial = sums()
    steps = []
    for epoch, batches in enumerate(setup.batches(EPOCHS, steps_per_epoch)):
        for step, batch in enumerate(batches):
            x, y = kept(batch, keep)
            lr = float(optimizer.param_groups[0]["lr"])
            # train_loop.py:164-203, as it is (but the lines LinePatch changes).
            total, ce, bce = trainer.train_step((common.prepare(net, x), y))
            extra = {"ce": ce, "bce": bce}
            if orders:
                extra["orders"] = trainer.harvester.orders_used
            steps.append(Step(epoch=epoch, step=step, loss=total,
                              lr={"backbone": lr, "embedding": lr, "loss": lr},
                              max_abs_grad=common.max_abs_grad(model.parameters()),
                              after=sums(), extra=extra))
    return initial, steps


#: Sizes at which their constructors' initial draws are compared with dmlsearch's (the traces
#: start from fixed tensors and cannot see an initialisation): the Cifar-10 model's 512-d
#: features and 10 classes, D as the chosen configuration (3 x 350, dropout 0.2).
INIT_SIZES = {"features": 512, "classes": 10, "n_hidden": 3, "hidden_size": 350}


def constructor_draws() -> dict[str, Any]:
    """Statistics of what their constructors draw at :data:`INIT_SIZES`, seed 0: the AM-softmax
    class rows (``models/losses.py`` AMSoftmax: ``kaiming_normal_`` of w, features x classes)
    and D's weights (``make_bin_layers``: PyTorch's Linear default)."""
    losses, resnet = sys.modules["models.losses"], sys.modules["models.resnet"]
    f, c = INIT_SIZES["features"], INIT_SIZES["classes"]
    torch.manual_seed(0)
    rows = losses.AMSoftmax(input_features=f, output_features=c).w.detach().t().norm(dim=1)
    d = resnet.ResNet.make_bin_layers(None, n_in=2 * f, n_h_layers=INIT_SIZES["n_hidden"],
                                      h_size=INIT_SIZES["hidden_size"], dropout_p=0.2)
    linear = [m for m in d if isinstance(m, nn.Linear)]
    return {**INIT_SIZES,
            "am_softmax_rows": {"how": "AMSoftmax: nn.init.kaiming_normal_(w (features x "
                                       "classes))",
                                "mean_norm": float(rows.mean()), "std_norm": float(rows.std())},
            "d_weight_std": [float(m.weight.detach().std()) for m in linear]}


def record(checkout: Path, setup: Setup) -> list[Trace]:
    common.deterministic()
    cifar = checkout / "cifar"
    files = [cifar / "train_loop.py", cifar / "train.py", cifar / "harvester.py",
             cifar / "models" / "losses.py", cifar / "models" / "resnet.py"]
    start = initial_d()
    traces = []
    with authors_imports(cifar, _THEIR_PACKAGES):
        for module in ("harvester", "models.losses", "models.resnet"):  # theirs, from cifar/
            importlib.import_module(module)

        for name, run in RUNS.items():
            patches = [_LABEL_SET, _MEAN_TARGETS] if run["smoothing"] > 0 else []
            train_loop = common.import_file(cifar / "train_loop.py", f"e2e_train_loop_{name}",
                                            patches)
            initial, steps = _record_run(train_loop, setup, orders=run["orders"],
                                         smoothing=run["smoothing"],
                                         steps_per_epoch=run.get("steps", STEPS_PER_EPOCH),
                                         keep=run.get("keep"))
            adaptations = [
                "The encoder is the shared tiny setup (common.build_network: dmlsearch's "
                "smallcnn trunk, GAP+GMP, Linear to 16, L2 norm) times "
                f"{D_INPUT_NORM:g} instead of their PreAct-ResNet18's raw pooled features: what "
                "their model.forward returns and D sees. AMSoftmax (models/losses.py) is built "
                "with 16 inputs and the setup's 6 classes, its weight w (d x C) set to the "
                "transpose of the setup's proxies; D is their ResNet.make_bin_layers(n_in=32, "
                f"n_h_layers={ARGS['n_hidden']}, h_size={ARGS['hidden_size']}, dropout_p=0) "
                "with the trace's initial_tensors, run by their ResNet.forward_bin.",
                "train.py (a script: downloads Cifar-10, GPU) is performed by "
                "benchmarks/reference_traces/_e2e.py: train.py:88 (SGD on model.parameters()) "
                "and train.py:90 (TrainLoop) without loaders; train_loop.py's train_step is "
                "called as it is with the setup's fixed batches (uint8 -> dmlsearch's "
                "prepare_input).",
                "CPU, fp32, 1 thread, torch.use_deterministic_algorithms(True).",
            ] + [p.describe("cifar/train_loop.py") + (
                " (their 10 is Cifar-10's class count; the setup has 6)" if p is _LABEL_SET
                else " (the draws' mean: BCE is linear in its target)") for p in patches]
            if run["orders"]:
                adaptations.append(
                    "TrainLoop.harvester (train_loop.py:33, their AllTripletSelector) is "
                    "wrapped: their selector runs on the batch presented in every within-class "
                    "order (each class through each of its k! orders equally often) and the "
                    "triplets are pooled (mapped back to the batch's positions), so the BCE of "
                    "train_loop.py:197 is the mean over the orders.")
            if run.get("keep") is not None:
                adaptations.append(
                    f"Each batch keeps only its positions {run['keep']} (classes of 3, 3, 2 "
                    "and 1 images) and the trace has 4 steps.")
            traces.append(Trace(
                name=name,
                description=run["description"],
                provenance=common.provenance(
                    repository=REPOSITORY, checkout=checkout, expected_commit=COMMIT,
                    files=files, adaptations=adaptations,
                    command=f"python -m benchmarks.reference_traces.record {OPTION} {checkout} "
                            "--out DIR",
                ),
                authors_args={**ARGS, "smoothing": run["smoothing"],
                              "kept_positions": run.get("keep"),
                              "dmlsearch_d_input_norm": D_INPUT_NORM,
                              "am_margin": AM_MARGIN, "am_scale": AM_SCALE,
                              "pooled_within_class_orders": run["orders"],
                              "constructor_draws": constructor_draws()},
                initial=initial,
                steps=steps,
                notes=[
                    "extra.ce and extra.bce: the AM-softmax cross-entropy and D's BCE of each "
                    "step (their train_step's return values).",
                    "cifar/train_loop.py applies no gradient clipping (asv/ and imagenet/ "
                    "clip the gradient norm); the lr schedule (ReduceLROnPlateau on the "
                    "validation EER after each epoch) does not act within one epoch.",
                ],
                initial_tensors={k: v.tolist() for k, v in start.items()},
            ))
    return traces
