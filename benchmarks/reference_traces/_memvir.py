"""MemVir's reference traces: the authors' ``train()`` of ``main.py`` with their MemVir queue.

From navervision/MemVir: ``loss/memvir.py`` (the queue: ``get_memory`` / ``put_memory`` /
``prepare_proxy`` / ``prepare_emb``), ``loss/softmax_variants.py`` (``NormSoftmax``,
``ProxyNCA``), ``net/pooling.py`` and ``net/embedding.py`` (GAP and the L2-normalised linear
embedding) and ``main.py`` are imported from the checkout and run as they are. ``main.py``'s
``train()`` (one epoch: BN put in eval mode by ``--freeze_BN``, then per batch: forward,
``memvir.get_memory`` and ``memvir.put_memory`` *before* the criterion, the criterion, Adam's
step) and ``adjust_learning_rate()`` are called as functions; only what ``main()`` does before the
epoch loop (building MemVir, the criterion, the parameter groups and Adam, ``main.py:206-237``) is
performed here, each line commented with the line it follows, because ``main()`` also reads
image folders, needs a GPU and writes checkpoints.

Two traces on the shared setup (``common``), 3 epochs x 4 steps each, every setting but N, M,
the warm-up and the sizes as the README's CARS196 MemVir commands give them (``--freeze_BN``,
Adam with their ``--eps 0.01`` default, ``--modellr 1e-4``, ``--centerlr 1e-2``, ``--wd 1e-4``
on every group, GAP, L2-normalised embedding, no lr decay inside the trace):

- ``memvir_norm_softmax``: ``NormSoftmax`` with ``--scale 23``, MemVir N = 2, M = 1,
  ``--warm_epoch 1``. Epoch 1 is the warm-up (no queue); in epoch 2 the queue fills and the
  first virtual class joins at its 3rd step; from epoch 3 on (4 stored steps, the queue's length
  N(M+1)) both virtual classes are used and the oldest entry leaves at every step.
- ``memvir_proxy_nca``: ``ProxyNCA`` with ``--scale 12``, N = 2, M = 2, ``--warm_epoch 1``: the
  first virtual class joins at epoch 2's 4th step, the second at epoch 3's 3rd.

Each step records the loss, the checksums of every parameter and BN buffer and of the class
weights (``loss.proxies``, as ``[C, d]``: the transpose of their ``fc_weight``), and in
``extra`` how many virtual steps the criterion used and how many entries the queue held.
"""

from __future__ import annotations

import contextlib
import io
import sys
import types
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks.reference_traces import common
from benchmarks.reference_traces.common import Setup
from benchmarks.reference_traces.common import Step
from benchmarks.reference_traces.common import Trace

OPTION = "--memvir"
REPOSITORY = "navervision/MemVir"
COMMIT = "ea7aef66331bdc8d65137a90c7d9f80e29f23da3"

EPOCHS, STEPS_PER_EPOCH = 3, 4
POOLING = "gap"  # their --pooling_type default GAP (every README command)

#: Their command-line arguments, common to both traces (main.py's parser; the README's CARS196
#: MemVir commands, with the setup's sizes and a small N, M and warm-up).
COMMON_ARGV = [
    "--data_name", "reference_trace",  # any name but the four known: "Using custom dataset"
    "--dim", str(common.EMBEDDING_SIZE), "-C", str(common.NUM_CLASSES),
    "--batch_size", str(common.BATCH_SIZE), "--epochs", str(EPOCHS),
    "--freeze_BN", "--n_instance", "1", "--pooling_type", "GAP",
    "--optimizer", "adam", "--modellr", "1e-4", "--centerlr", "1e-2", "--wd", "1e-4",
    "--eps", "0.01", "--decay_step", "2000", "--decay_stop", "2000",
    "--memvir", "1", "--warm_epoch", "1",
]
RUNS: dict[str, dict[str, Any]] = {
    "memvir_norm_softmax": {
        "argv": ["--loss", "NormSoftmax", "--scale", "23.0",
                 "--mem_num_step", "2", "--mem_step_gap", "1"],
        "description": "MemVir (loss/memvir.py) around NormSoftmax (scale 23), N=2, M=1, warm-up "
                       "1 epoch; main.py's train(): BN in eval mode (--freeze_BN, affine "
                       "trained), Adam eps 0.01, model lr 1e-4, class weights lr 1e-2, weight "
                       "decay 1e-4 on every group; 3 epochs x 4 steps.",
    },
    "memvir_proxy_nca": {
        "argv": ["--loss", "ProxyNCA", "--scale", "12.0", "--init_type", "normal",
                 "--mem_num_step", "2", "--mem_step_gap", "2"],
        "description": "MemVir (loss/memvir.py) around ProxyNCA (scale 12), N=2, M=2, warm-up "
                       "1 epoch; main.py's train(): BN in eval mode (--freeze_BN, affine "
                       "trained), Adam eps 0.01, model lr 1e-4, proxies lr 1e-2, weight decay "
                       "1e-4 on every group; 3 epochs x 4 steps.",
    },
}

ADAPTATIONS = [
    "The network is the shared tiny setup: their `model` (the trunk giving feature maps) is "
    "dmlsearch's smallcnn trunk holding the setup's initial weights (common.build_network(setup, "
    "pooling='gap').trunk) instead of their pretrained BNInception; their own pooling "
    "(net/pooling.py, GAP) and embedding (net/embedding.py, Linear + L2 norm) modules are used, "
    "the embedding's Linear loaded with the setup's embedding layer; the class weights "
    "(`fc_weight`, d x C) are set to the transpose of the setup's proxies after construction.",
    "main.py is imported from the checkout with `torch.utils.tensorboard` replaced by a stub "
    "whose SummaryWriter does nothing (tensorboard is not installed; main.py:26, used at "
    "main.py:442-444 for logging only). main() is not run (image folders, GPU, checkpoints): "
    "what it does before the epoch loop, main.py:206-237 (MemVir, the criterion, the parameter "
    "groups, Adam), is performed by benchmarks/reference_traces/_memvir.py, each line commented "
    "with the line it follows, without the .cuda() calls (CPU); the epoch loop main.py:312-320 "
    "is performed the same way and calls their adjust_learning_rate() and train() unchanged.",
    "Their train_loader is replaced by the setup's fixed batches (uint8 -> dmlsearch's "
    "prepare_input, [-1, 1]); args.gpu is None, so train() moves nothing to a GPU.",
    "To record each step, the optimizer handed to train() is a thin wrapper whose step() calls "
    "Adam's step() and then reads the checksums; the loss is read by a forward hook on the "
    "criterion. Their print() output (MemVir's '[PM-prx]' lines, the loss every 10 steps) is "
    "discarded.",
    "CPU, fp32, 1 thread, torch.use_deterministic_algorithms(True) (common.deterministic).",
]


# ---- the authors' modules ---------------------------------------------------------------------
_THEIR_PACKAGES = ("loss", "net", "utils")


@contextlib.contextmanager
def authors_imports(root: Path, packages: tuple[str, ...]) -> Iterator[None]:
    """``root`` first on ``sys.path`` while inside, and ``packages`` (their top-level names, e.g.
    ``utils``) imported fresh from it; afterwards ``sys.path`` and those ``sys.modules`` entries
    are as before, so another checkout's ``utils`` cannot be confused with this one's."""
    def ours(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in packages)

    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))
        for k in [k for k in sys.modules if ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)


@contextlib.contextmanager
def tensorboard_stub() -> Iterator[None]:
    """``torch.utils.tensorboard`` as a module whose ``SummaryWriter`` does nothing."""
    class SummaryWriter:  # the methods train() calls
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def add_scalar(self, *args: Any, **kwargs: Any) -> None:
            pass

        def flush(self) -> None:
            pass

    name = "torch.utils.tensorboard"
    saved = sys.modules.get(name)
    stub = types.ModuleType(name)
    stub.SummaryWriter = SummaryWriter  # type: ignore[attr-defined]
    sys.modules[name] = stub
    try:
        yield
    finally:
        if saved is None:
            del sys.modules[name]
        else:
            sys.modules[name] = saved


class _RecordingOptimizer:
    """What train() sees as its optimizer: Adam's ``zero_grad``/``step``/``param_groups``;
    ``step`` also records the step (``on_step`` runs after Adam's update)."""

    def __init__(self, optimizer: torch.optim.Optimizer,
                 before_step: Callable[[], dict[str, Any]],
                 on_step: Callable[[dict[str, Any]], None]) -> None:
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups
        self._before, self._after = before_step, on_step

    def zero_grad(self, *args: Any, **kwargs: Any) -> None:
        self.optimizer.zero_grad(*args, **kwargs)

    def step(self) -> None:
        state = self._before()
        self.optimizer.step()
        self._after(state)


def _record_run(main: types.ModuleType, loss_pkg: types.ModuleType, net_pkg: types.ModuleType,
                setup: Setup, argv: list[str]) -> tuple[dict[str, Any], dict[str, list[float]],
                                                        list[Step]]:
    """One run of their procedure; returns their args (as parsed), initial checksums, steps."""
    args = main.parser.parse_args(COMMON_ARGV + argv)
    shared = common.build_network(setup, pooling=POOLING)
    model = shared.trunk  # their `model`: feature maps [B, C, H, W]
    with contextlib.redirect_stdout(io.StringIO()):  # net/pooling.py prints its type
        pooling = net_pkg.pooling(pooling_type=args.pooling_type.split(","))
    embedding = net_pkg.embedding(input_dim=shared.embedding.in_features, output_dim=args.dim)
    embedding.embedding.load_state_dict(shared.embedding.state_dict())

    # main.py:207-210: MemVir's queue object when --memvir.
    memvir = loss_pkg.MemVir(args) if args.memvir else None
    # main.py:225-230: the criterion (NormSoftmax or ProxyNCA) with the queue.
    if args.loss.lower() == "normsoftmax":
        criterion = loss_pkg.NormSoftmax(args.dim, args.C, scale=args.scale, memvir=memvir)
    elif args.loss.lower() == "proxynca":
        criterion = loss_pkg.ProxyNCA(args.dim, args.C, scale=args.scale,
                                      init_type=args.init_type, memvir=memvir)
    else:
        raise ValueError(args.loss)
    with torch.no_grad():  # the setup's class weights instead of their random draw
        criterion.fc_weight.copy_(setup.proxies().t())
    # main.py:232-234: three groups, model and embedding at modellr, the criterion at centerlr.
    params_list = [{"params": model.parameters(), "lr": args.modellr},
                   {"params": embedding.parameters(), "lr": args.modellr},
                   {"params": criterion.parameters(), "lr": args.centerlr}]
    # main.py:236-237: Adam with their eps and weight decay on every group.
    assert args.optimizer.lower() == "adam"
    adam = torch.optim.Adam(params_list, eps=args.eps, weight_decay=args.weight_decay)

    def sums() -> dict[str, list[float]]:
        named = {"model.trunk." + k: v for k, v in model.state_dict().items()}
        named.update({"model." + k: v for k, v in embedding.state_dict().items()})
        named["loss.proxies"] = criterion.fc_weight.t()
        return common.checksums(named)

    everything = [*model.parameters(), *embedding.parameters(), *criterion.parameters()]
    group_names = ("backbone", "embedding", "loss")
    steps: list[Step] = []
    seen: dict[str, Any] = {}
    where = {"epoch": 0, "step": 0}

    def hook(module: torch.nn.Module, inputs: Any, output: torch.Tensor) -> None:
        seen["loss"] = float(output.detach())
        used = max(len(memvir.pxy_len_list) - 1, 0) if memvir is not None else 0
        seen["virtual_steps"] = used
        seen["queue"] = memvir.emb_que[0].qsize() if memvir is not None else 0

    criterion.register_forward_hook(hook)

    def before() -> dict[str, Any]:
        return {"lr": {n: float(g["lr"]) for n, g in zip(group_names, adam.param_groups)},
                "max_abs_grad": common.max_abs_grad(everything)}

    def after(state: dict[str, Any]) -> None:
        steps.append(Step(
            epoch=where["epoch"], step=where["step"], loss=seen["loss"], lr=state["lr"],
            max_abs_grad=state["max_abs_grad"], after=sums(),
            extra={"virtual_steps": seen["virtual_steps"], "queue_entries": seen["queue"]},
        ))
        where["step"] += 1

    optimizer = _RecordingOptimizer(adam, before, after)
    writer = sys.modules["torch.utils.tensorboard"].SummaryWriter()
    initial = sums()
    batches = setup.batches(EPOCHS, STEPS_PER_EPOCH)
    global_step = 0
    # main.py:312-320: the epoch loop (1-based epochs), lr adjusted before each epoch's train().
    for epoch in range(args.start_epoch, args.epochs):
        epoch += 1  # main.py:313
        where["epoch"], where["step"] = epoch - 1, 0
        main.adjust_learning_rate(adam, epoch, args)  # main.py:315
        loader = [(common.prepare(shared, x), y) for x, y in batches[epoch - 1]]
        with contextlib.redirect_stdout(io.StringIO()):
            global_step = main.train(loader, model, pooling, embedding, criterion, optimizer,
                                     writer, global_step, epoch, memvir, None, None, args)
    return vars(args), initial, steps


#: The published CARS196 recipes' sizes (--dim 512, C = 98 training classes): the class weights
#: their constructors draw at these sizes are compared with dmlsearch's (the traces themselves
#: start from the setup's class weights and cannot see an initialisation).
INIT_SIZES = (512, 98)


def constructor_rows(loss_pkg: types.ModuleType, argv: list[str], main: types.ModuleType
                     ) -> dict[str, Any]:
    """Mean and spread of the class-row norms their criterion draws (``main.py:225-230`` with
    the run's arguments) at :data:`INIT_SIZES`, seed 0."""
    args = main.parser.parse_args(COMMON_ARGV + argv)
    d, c = INIT_SIZES
    torch.manual_seed(0)
    if args.loss.lower() == "normsoftmax":
        crit = loss_pkg.NormSoftmax(d, c, scale=args.scale, memvir=None)
        how = "NormSoftmax: init.kaiming_uniform_(fc_weight (d x C), a=sqrt(5))"
    else:
        crit = loss_pkg.ProxyNCA(d, c, scale=args.scale, init_type=args.init_type, memvir=None)
        how = (f"ProxyNCA init_type={args.init_type!r}: init.kaiming_normal_(fc_weight (d x C), "
               "mode='fan_out')")
    norms = crit.fc_weight.detach().t().norm(dim=1)
    return {"embedding_size": d, "num_classes": c, "how": how,
            "mean_norm": float(norms.mean()), "std_norm": float(norms.std())}


def record(checkout: Path, setup: Setup) -> list[Trace]:
    common.deterministic()
    files = [checkout / "main.py", checkout / "loss" / "memvir.py",
             checkout / "loss" / "softmax_variants.py", checkout / "net" / "pooling.py",
             checkout / "net" / "embedding.py"]
    traces = []
    with authors_imports(checkout, _THEIR_PACKAGES), tensorboard_stub():
        main = common.import_file(checkout / "main.py", "memvir_authors_main")
        loss_pkg, net_pkg = sys.modules["loss"], sys.modules["net"]
        for name, run in RUNS.items():
            args, initial, steps = _record_run(main, loss_pkg, net_pkg, setup, run["argv"])
            joins = [f"epoch {s.epoch + 1} step {s.step + 1}: {s.extra['virtual_steps']}"
                     for i, s in enumerate(steps)
                     if i == 0 or s.extra["virtual_steps"] != steps[i - 1].extra["virtual_steps"]]
            traces.append(Trace(
                name=name,
                description=run["description"],
                provenance=common.provenance(
                    repository=REPOSITORY, checkout=checkout, expected_commit=COMMIT,
                    files=files, adaptations=list(ADAPTATIONS),
                    command=f"python -m benchmarks.reference_traces.record {OPTION} {checkout} "
                            "--out DIR",
                ),
                authors_args={**{k: v for k, v in args.items()
                                 if k not in ("data", "save_path", "gpu")},
                              "constructor_class_rows": constructor_rows(loss_pkg, run["argv"],
                                                                         main)},
                initial=initial,
                steps=steps,
                notes=[
                    "virtual steps used by the criterion (from the first step on, then where the "
                    "count changes): " + "; ".join(joins),
                    "main.py:425-429: get_memory (the queue as it was) and put_memory (this "
                    "batch's detached L2-normalised embeddings and a copy of fc_weight before "
                    "the update) both run before the criterion; prepare_proxy/prepare_emb take "
                    "the (M+1)-th, 2(M+1)-th, ... most recent stored steps, labels offset by "
                    "C, 2C, ...; the queue keeps N(M+1) steps.",
                    "put_memory/get_memory do nothing while epoch <= warm_epoch (1-based), so "
                    "with --warm_epoch 1 the queue starts with epoch 2.",
                ],
            ))
    return traces
