"""The tiny fixed setup every reference trace shares, and how traces are stored and compared.

A *reference trace* (issue 32) is what the authors' own code does, step by step, on a tiny fixed
setup: each optimiser step's loss, and checksums of every parameter and buffer before the first
step and after each one. ``record.py`` runs the authors' code (imported from a checkout of their
repository at record time) and stores the numbers as test fixtures; the tests
(``tests/trainables/test_reference_traces.py``) run dmlsearch's recipe on the same setup and
require the same numbers. The fixtures are numbers only: no code of the authors is stored here.

The setup (:func:`make_setup`, stored once in ``setup.npz`` by :func:`save_setup`):

- **Network**: dmlsearch's ``smallcnn`` trunk (four conv-BN-ReLU blocks, 32/64/128/256 channels,
  three 2x2 max-pools) with 3 input channels, pooled by ``gap+gmp`` (summed, as Proxy-Anchor's
  and the thesis's code do), a Linear to :data:`EMBEDDING_SIZE` and L2 normalisation: exactly
  what :func:`dmlsearch.trainables.models.build_model` builds (:func:`build_network`). The
  authors' procedures run on this same module, so a trace compares *recipes* (loss, parameter
  groups, optimiser, BN freezing, warm-up, clipping, schedule), not architectures.
- **Initial weights**, stored as float16 and widened to float32 on load (so both sides start
  from bit-identical fp32 values and the file stays small): the trunk as a "pretrained" trunk
  (kaiming convolutions, BN affine weights near 1 / biases near 0, and BN running statistics
  accumulated over calibration images that are *not* the training batches, so that frozen and
  batch statistics differ), the embedding layer (kaiming ``fan_out``, bias 0, as every
  authors' head, then made orthogonal to the calibration images' mean pooled feature so that
  embeddings are spread as a trained head's are, not all alike), and ``proxies``:
  :data:`NUM_CLASSES` x :data:`EMBEDDING_SIZE` class rows (kaiming ``fan_out``, Proxy-Anchor's
  initialisation) for the losses with class weights.
- **Batches**: :data:`NUM_BATCHES` batches of :data:`BATCH_SIZE` uint8 images 3x16x16, each
  :data:`CLASSES_PER_BATCH` classes x :data:`IMAGES_PER_CLASS` images of the
  :data:`NUM_CLASSES` classes (so every batch has positives and negatives, and some classes
  are absent from each batch: proxies without positives). An image is a class template
  blended with noise, so a class's embeddings correlate. Labels are 0..C-1 (also dmlsearch's
  ``label_index`` of a training set holding every class).
- **Float input**: dmlsearch's :func:`~dmlsearch.trainables.models.prepare_input` (smallcnn:
  ``x / 127.5 - 1``), on the CPU, fp32 (:func:`prepare`).

A trace (:class:`Trace`, one JSON file each) holds, for every step: the epoch and step, the
loss, each parameter group's learning rate, the largest absolute gradient before clipping, and
:func:`checksums` of every tensor after the step, under canonical names: ``model.<state_dict
key>`` for the network (parameters and BN buffers), ``loss.<name>`` for the loss's own
parameters (``loss.proxies`` for proxies / class weights, whatever the implementation calls
them). :func:`compare` applies the tolerance policy (:class:`Tolerance`).

Recipe modules (``_proxy_anchor.py``, ``_thesis_proxy.py``, ``_multi_similarity.py``; later
``_memvir.py``, ``_e2e.py``) each define::

    OPTION: str            # record.py's option naming the authors' checkout, e.g. "--proxy-anchor"
    REPOSITORY: str        # "owner/name" on GitHub
    COMMIT: str            # the commit the fixtures were recorded from
    def record(checkout: Path, setup: Setup) -> list[Trace]

``record.py`` imports the modules listed in its ``RECIPES`` that exist, and calls ``record`` for
each whose option was given. A recipe that needs initial tensors beyond the shared ones (E2E's
distance network) draws them at record time with :func:`initial_tensor` and stores them in its
trace (:attr:`Trace.initial_tensors`; keep them small).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import platform
import subprocess
import sys
import types
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "BATCH_SIZE",
    "CLASSES_PER_BATCH",
    "EMBEDDING_SIZE",
    "FIXTURES",
    "IMAGES_PER_CLASS",
    "IMAGE_SHAPE",
    "NUM_BATCHES",
    "NUM_CLASSES",
    "POOLING",
    "Run",
    "Setup",
    "Step",
    "LinePatch",
    "Tolerance",
    "Trace",
    "build_network",
    "checksums",
    "compare",
    "cuda_as_cpu",
    "deterministic",
    "dmlsearch_settings",
    "file_sha256",
    "git_commit",
    "import_file",
    "initial_tensor",
    "load_setup",
    "load_trace",
    "make_setup",
    "max_abs_grad",
    "model_checksums",
    "prepare",
    "provenance",
    "run_fitter",
    "save_setup",
    "save_trace",
]

#: Where the fixtures live (the tests read them there).
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "trainables" / "fixtures" / \
    "reference_traces"
SETUP_FILE = "setup.npz"

BACKBONE = "smallcnn"
POOLING = "gap+gmp"
IMAGE_SHAPE = (3, 16, 16)
NUM_CLASSES = 6
EMBEDDING_SIZE = 16
CLASSES_PER_BATCH = 4
IMAGES_PER_CLASS = 3
BATCH_SIZE = CLASSES_PER_BATCH * IMAGES_PER_CLASS
#: Batches stored; a trace uses the first ``epochs x steps_per_epoch`` of them.
NUM_BATCHES = 12
#: The seed of everything :func:`make_setup` draws.
SETUP_SEED = 20261127


# ---- the setup ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Setup:
    """The shared fixed setup (see the module docstring).

    Attributes:
        images: uint8 ``[NUM_BATCHES, BATCH_SIZE, 3, 16, 16]``.
        labels: int64 ``[NUM_BATCHES, BATCH_SIZE]``, classes ``0..NUM_CLASSES-1``.
        initial: float32 arrays: ``model.<key>`` for every entry of the network's state_dict
            (``model.trunk.*`` and ``model.embedding.*``; BN's ``num_batches_tracked`` is
            int64) and ``loss.proxies`` (``NUM_CLASSES x EMBEDDING_SIZE``).
    """

    images: np.ndarray
    labels: np.ndarray
    initial: Mapping[str, np.ndarray]

    def batches(self, epochs: int, steps_per_epoch: int) -> list[list[tuple[torch.Tensor,
                                                                            torch.Tensor]]]:
        """``batches[e][s] = (uint8 images [B, 3, 16, 16], int64 labels [B])``: the first
        ``epochs x steps_per_epoch`` stored batches, epoch by epoch (fresh tensors each call)."""
        if epochs * steps_per_epoch > len(self.images):
            raise ValueError(f"the setup holds {len(self.images)} batches, "
                             f"{epochs} x {steps_per_epoch} asked")
        out = []
        for e in range(epochs):
            epoch = []
            for s in range(steps_per_epoch):
                k = e * steps_per_epoch + s
                epoch.append((torch.from_numpy(self.images[k].copy()),
                              torch.from_numpy(self.labels[k].copy())))
            out.append(epoch)
        return out

    def model_state(self) -> dict[str, torch.Tensor]:
        """The network's initial state_dict (trunk and embedding layer)."""
        return {k[len("model."):]: torch.from_numpy(v.copy())
                for k, v in self.initial.items() if k.startswith("model.")}

    def trunk_state(self) -> dict[str, torch.Tensor]:
        """The trunk's initial state_dict (keys of the ``smallcnn`` trunk, e.g. ``body.0.weight``):
        what a ``pretrained`` weights file holds."""
        return {k[len("trunk."):]: v for k, v in self.model_state().items()
                if k.startswith("trunk.")}

    def proxies(self) -> torch.Tensor:
        """The initial proxies / class weights, float32 ``[NUM_CLASSES, EMBEDDING_SIZE]``."""
        return torch.from_numpy(self.initial["loss.proxies"].copy())

    def images_and_labels(self) -> tuple[torch.Tensor, np.ndarray]:
        """Every stored image and label, flattened (e.g. for a training ImageSet)."""
        return (torch.from_numpy(self.images.reshape(-1, *IMAGE_SHAPE).copy()),
                self.labels.reshape(-1).copy())


def _fp16(t: torch.Tensor) -> torch.Tensor:
    """Rounded to float16-representable values (stored as float16, exact in float32)."""
    return t.detach().to(torch.float16).to(torch.float32) if t.is_floating_point() else t


def make_setup(seed: int = SETUP_SEED) -> Setup:
    """Draw the setup (record time only; the tests read :func:`load_setup`'s copy)."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(IMAGE_SHAPE))
    templates = rng.integers(0, 256, size=(NUM_CLASSES, size))

    def draw(labels: np.ndarray) -> np.ndarray:
        noise = rng.integers(0, 256, size=(len(labels), size))
        pixels = np.rint(0.6 * templates[labels] + 0.4 * noise)
        return pixels.clip(0, 255).astype(np.uint8).reshape(len(labels), *IMAGE_SHAPE)

    labels = np.stack([
        np.repeat(np.sort(rng.permutation(NUM_CLASSES)[:CLASSES_PER_BATCH]), IMAGES_PER_CLASS)
        for _ in range(NUM_BATCHES)
    ]).astype(np.int64)
    images = np.stack([draw(y) for y in labels])
    # Calibration images: blends of other templates (classes the traces never train on).
    others = rng.integers(0, 256, size=(4, size))
    calibration = np.rint(0.6 * others[rng.integers(0, 4, size=(4, 32))]
                          + 0.4 * rng.integers(0, 256, size=(4, 32, size)))
    calibration = calibration.clip(0, 255).astype(np.uint8).reshape(4, 32, *IMAGE_SHAPE)

    torch.manual_seed(seed)
    net = _bare_network()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.trunk.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(1.0 + 0.1 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))
        # "Pretrained" BN statistics: a cumulative average over calibration images of other
        # class templates (not the training batches), so eval-mode BN differs from batch BN.
        momenta = {}
        for m in net.trunk.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                momenta[m] = m.momentum
                m.momentum = None  # cumulative average
                m.reset_running_stats()
        net.train()
        for batch in calibration:
            net.trunk(prepare(net, torch.from_numpy(batch)))
        for m, momentum in momenta.items():
            m.momentum = momentum
        # The embedding layer (kaiming fan_out, bias 0) made blind to the mean pooled feature
        # of the calibration images: post-ReLU features share one large mean direction, which
        # would make every embedding of a fresh head nearly the same; a trained head (and a
        # pretrained trunk) spreads them, as here.
        net.eval()
        pooled = torch.cat([net.pool(net.trunk(prepare(net, torch.from_numpy(b))))
                            for b in calibration])
        mean = pooled.mean(dim=0)
        mean = mean / mean.norm()
        w = net.embedding.weight
        w.copy_(w - (w @ mean)[:, None] * mean[None, :])
    proxies = torch.empty(NUM_CLASSES, EMBEDDING_SIZE)
    torch.nn.init.kaiming_normal_(proxies, mode="fan_out")
    initial = {"model." + k: _fp16(v).numpy() for k, v in net.state_dict().items()}
    initial["loss.proxies"] = _fp16(proxies).numpy()
    return Setup(images=images, labels=labels, initial=initial)


def save_setup(setup: Setup, folder: Path = FIXTURES) -> Path:
    """Write ``setup.npz`` (float tensors as float16: they are float16-representable)."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {"images": setup.images, "labels": setup.labels}
    for k, v in setup.initial.items():
        arrays["initial/" + k] = v.astype(np.float16) if v.dtype == np.float32 else v
    path = folder / SETUP_FILE
    np.savez_compressed(path, **arrays)
    back = load_setup(folder)  # float16 storage must be lossless
    for k, v in setup.initial.items():
        assert np.array_equal(back.initial[k], v), k
    return path


def load_setup(folder: Path = FIXTURES) -> Setup:
    """Read ``setup.npz``; float arrays widened to float32."""
    with np.load(folder / SETUP_FILE) as data:
        initial = {}
        for key in data.files:
            if key.startswith("initial/"):
                v = data[key]
                initial[key[len("initial/"):]] = v.astype(np.float32) if v.dtype == np.float16 \
                    else v
        return Setup(images=data["images"], labels=data["labels"].astype(np.int64),
                     initial=initial)


def initial_tensor(name: str, shape: tuple[int, ...], *, init: str = "kaiming_fan_out",
                   seed: int = SETUP_SEED) -> torch.Tensor:
    """A further fixed initial tensor for one recipe (e.g. E2E's distance network), drawn from a
    generator seeded by ``seed`` and ``name`` and rounded to float16-representable values;
    ``init``: ``kaiming_fan_out``, ``normal`` or ``zeros``. Store it in the trace."""
    digest = int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little")
    gen = torch.Generator().manual_seed(digest % 2**63)
    if init == "zeros":
        return torch.zeros(shape)
    t = torch.randn(shape, generator=gen)
    if init == "kaiming_fan_out":
        fan_out = shape[0] * (int(np.prod(shape[2:])) if len(shape) > 2 else 1)
        t = t * math.sqrt(2.0 / fan_out)
    elif init != "normal":
        raise ValueError(f"init must be kaiming_fan_out, normal or zeros, got {init!r}")
    return _fp16(t)


def _bare_network(pooling: str = POOLING) -> torch.nn.Module:
    from dmlsearch.trainables.models import build_model

    return build_model(backbone=BACKBONE, in_channels=IMAGE_SHAPE[0],
                       embedding_size=EMBEDDING_SIZE, pooling=pooling, pretrained="none")


def build_network(setup: Setup, pooling: str = POOLING) -> torch.nn.Module:
    """dmlsearch's ``smallcnn`` embedding network (``build_model``) holding the initial weights,
    in training mode with every parameter trainable: the module the authors' procedures run on.
    Its trunk is ``.trunk``, its embedding layer ``.embedding``."""
    net = _bare_network(pooling)
    net.load_state_dict(setup.model_state())
    net.train()
    return net


def prepare(model: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    """uint8 images → the network's float input (dmlsearch's ``prepare_input``, CPU, fp32)."""
    from dmlsearch.trainables.models import prepare_input

    return prepare_input(model, images, torch.device("cpu"))


def deterministic(threads: int = 1) -> None:
    """Settings of every recording and test (on the CPU, in fp32): ``threads`` intra-op
    threads and deterministic algorithms. A test restores both afterwards."""
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)


# ---- checksums ------------------------------------------------------------------------------
def checksums(named: Mapping[str, torch.Tensor]) -> dict[str, list[float]]:
    """Per tensor ``[n, Σx, Σx², Σ wᵢxᵢ]`` in float64, ``wᵢ = sin(i + 1)`` over the flattened
    tensor (the weighted sum sees a change that moves values around without changing the first
    two, e.g. two elements swapped)."""
    out = {}
    for name, t in named.items():
        x = t.detach().reshape(-1).to(torch.float64)
        w = torch.sin(torch.arange(1, x.numel() + 1, dtype=torch.float64))
        out[name] = [float(x.numel()), float(x.sum()), float((x * x).sum()), float((w * x).sum())]
    return out


def model_checksums(model: torch.nn.Module,
                    loss_tensors: Mapping[str, torch.Tensor] | None = None
                    ) -> dict[str, list[float]]:
    """:func:`checksums` of ``model``'s state_dict (``model.<key>``) and of ``loss_tensors``
    (``loss.<name>``, canonical names: ``proxies`` for class rows)."""
    named = {"model." + k: v for k, v in model.state_dict().items()}
    named.update({"loss." + k: v for k, v in (loss_tensors or {}).items()})
    return checksums(named)


def max_abs_grad(params: Iterable[torch.nn.Parameter]) -> float:
    """The largest |gradient| over ``params`` (0 if none has a gradient)."""
    best = 0.0
    for p in params:
        if p.grad is not None and p.grad.numel():
            best = max(best, float(p.grad.detach().abs().max()))
    return best


# ---- traces ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Step:
    """One optimiser step: ``epoch`` and ``step`` (0-based, step within the epoch), the loss,
    the learning rate of each parameter group by name, the largest |gradient| before clipping,
    the checksums after the step, and ``extra``: diagnostics of the recipe (numbers a reader
    wants, e.g. the largest exponent a loss met, or how many virtual classes were active)."""

    epoch: int
    step: int
    loss: float
    lr: dict[str, float]
    max_abs_grad: float
    after: dict[str, list[float]]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Trace:
    """One recorded trace (one JSON file, ``<name>.json``).

    ``authors_args``: the authors' settings the trace ran with (their names; command-line or
    config values); ``notes``: what a reader should know (quirks met, values measured);
    ``initial``: checksums before the first step; ``initial_tensors``: recipe-specific initial
    tensors beyond the shared setup (name → nested lists), if any.
    """

    name: str
    description: str
    provenance: dict[str, Any]
    authors_args: dict[str, Any]
    initial: dict[str, list[float]]
    steps: list[Step] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    initial_tensors: dict[str, Any] = dataclasses.field(default_factory=dict)

    def losses(self) -> list[float]:
        return [s.loss for s in self.steps]

    @property
    def epochs(self) -> int:
        return len({s.epoch for s in self.steps})

    @property
    def steps_per_epoch(self) -> int:
        return sum(1 for s in self.steps if s.epoch == 0)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Trace:
        data = dict(data)
        data["steps"] = [Step(**s) for s in data.get("steps", [])]
        return cls(**data)


def save_trace(trace: Trace, folder: Path = FIXTURES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{trace.name}.json"
    path.write_text(json.dumps(trace.to_json(), indent=1) + "\n")
    return path


def load_trace(name: str, folder: Path = FIXTURES) -> Trace:
    return Trace.from_json(json.loads((folder / f"{name}.json").read_text()))


# ---- tolerance ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Tolerance:
    """The tolerance policy: two float32 runs of the same recipe that differ only in the order
    of floating-point operations (a log-sum-exp against a plain log(1 + Σ exp), another
    normalisation formula, another summation order) agree to a few float32 ulps per operation;
    a handful of Adam steps keeps that relative size, because Adam's step is the ratio of two
    moments of the same gradient. So:

    - a loss matches when ``|a - e| <= rtol * |e| + atol``;
    - a tensor's ``Σx`` and ``Σwx`` match when ``|a - e| <= rtol * sqrt(n Σx²) + atol`` (the
      largest the sum can move when every element moves by ``rtol`` of its size), ``Σx²`` when
      ``|a - e| <= 2 rtol Σx² + atol``; ``n`` must be equal.

    The default ``rtol`` 1e-5 is about 100 float32 ulps: far above reordering noise (dmlsearch
    against the authors' code on the traces: at most 3e-7 in these units), below what the recipe
    differences the traces are meant to catch change (the tests' "tells apart" checks require a
    mismatch; the smallest, gradient clipping on ``proxy_anchor``, moves a loss by 3e-5). What
    moves the numbers by less than ``rtol`` is not seen: a trace meant to see it must be made to
    move them more (``proxy_anchor_decay``'s larger weight decay).
    """

    rtol: float = 1e-5
    atol: float = 1e-7


def compare(expected: Trace, steps: list[tuple[float, Mapping[str, list[float]]]] | None,
            initial: Mapping[str, list[float]] | None = None,
            tol: Tolerance = Tolerance(), *, names: Iterable[str] | None = None) -> list[str]:
    """Mismatches between ``expected`` and a run's ``steps`` (``(loss, checksums)`` per step;
    None: not compared) and ``initial`` checksums (None: not compared); an empty list: the run
    matches. ``names``: the tensors compared (default: every tensor of the trace; a tensor
    missing from the run is a mismatch)."""
    problems: list[str] = []
    if steps is not None and len(steps) != len(expected.steps):
        problems.append(f"{len(steps)} steps run, {len(expected.steps)} recorded")

    def tensors(label: str, want: Mapping[str, list[float]], got: Mapping[str, list[float]]
                ) -> None:
        for name in (names if names is not None else want):
            if name not in got:
                problems.append(f"{label}: {name} missing")
                continue
            (n, s, q, w), (n2, s2, q2, w2) = want[name], got[name]
            if n != n2:
                problems.append(f"{label}: {name} has {n2:g} elements, {n:g} recorded")
                continue
            spread = math.sqrt(n * q)
            for what, e, a, bound in (("sum", s, s2, tol.rtol * spread + tol.atol),
                                      ("sum of squares", q, q2, 2 * tol.rtol * q + tol.atol),
                                      ("weighted sum", w, w2, tol.rtol * spread + tol.atol)):
                if not abs(a - e) <= bound:
                    problems.append(f"{label}: {name} {what} {a!r}, recorded {e!r} "
                                    f"(|diff| {abs(a - e):.3g} > {bound:.3g})")

    if initial is not None:
        tensors("initial", expected.initial, initial)
    for i, (step, (loss, sums)) in enumerate(zip(expected.steps, steps or [])):
        label = f"step {i + 1} (epoch {step.epoch + 1})"
        if not abs(loss - step.loss) <= tol.rtol * abs(step.loss) + tol.atol:
            problems.append(f"{label}: loss {loss!r}, recorded {step.loss!r}")
        tensors(label, step.after, sums)
    return problems


# ---- running dmlsearch's recipe on the setup ------------------------------------------------
#: One run: the initial checksums, and (loss, checksums after the step) for each step.
Run = tuple[dict[str, list[float]], list[tuple[float, dict[str, list[float]]]]]


def dmlsearch_settings(weights: Path, trace: Trace) -> dict[str, Any]:
    """The flat trial settings every trace's dmlsearch run shares: the tiny setup's network
    with ``weights`` (a file holding :meth:`Setup.trunk_state`) as its ``pretrained`` trunk (so
    frozen BN and the head warm-up act), the trace's epochs, fixed batches of
    :data:`BATCH_SIZE`, on the CPU in fp32 with one thread. A recipe adds its own."""
    return {
        "backbone": BACKBONE, "pretrained": str(weights), "embedding_size": EMBEDDING_SIZE,
        "pooling": POOLING, "batch_sampler": "random", "batch_size": BATCH_SIZE,
        "epochs": trace.epochs, "device": "cpu", "precision": "fp32", "threads": 1,
        "workers": 0, "compile": False,
    }


def _class_rows(fitter: Any) -> dict[str, torch.Tensor]:
    weight = getattr(fitter.loss.criterion, "weight", None)
    return {"proxies": weight} if isinstance(weight, torch.Tensor) else {}


def run_fitter(
    setup: Setup, flat: Mapping[str, Any], *, epochs: int, steps_per_epoch: int,
    prepare_fitter: Callable[[Any], None] | None = None,
    loss_tensors: Callable[[Any], Mapping[str, torch.Tensor]] = _class_rows,
    start: Callable[[Any], None] | None = None,
    keep: Sequence[int] | None = None,
) -> Run:
    """Train dmlsearch's recipe ``flat`` (flat trial settings; start from
    :func:`dmlsearch_settings`) on the setup through the public path: ``TrialConfig.from_flat``,
    a ``Fitter`` on a training set holding the setup's images, the setup's embedding layer and
    class rows (``loss.criterion.weight``, when the loss has one) loaded, then per epoch
    ``fitter.train_epoch(batches)`` and ``fitter.finish_epoch()``.

    ``prepare_fitter(fitter)``: called after the setup's weights are loaded (load a recipe's
    own initial tensors, or change something to show a trace tells it apart).
    ``loss_tensors(fitter)``: the loss's tensors to checksum, under the trace's canonical names
    (default: ``{"proxies": loss.criterion.weight}`` when it exists).
    ``start(fitter)``: loads the recipe's initial tensors instead of the setup's head and class
    rows (under ``no_grad``). ``keep``: the positions of every batch kept (batches cut to
    classes of unequal size).
    """
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.data import ImageSet
    from dmlsearch.trainables.fit import Fitter

    cfg = TrialConfig.from_flat(dict(flat))
    images, labels = setup.images_and_labels()
    train = ImageSet(images=images, labels=labels,
                     class_names=tuple(f"class{i}" for i in range(NUM_CLASSES)))
    fitter = Fitter(cfg, train, None, seed=0)
    try:
        assert fitter.label_index.tolist() == list(range(NUM_CLASSES))
        with torch.no_grad():  # the setup's head and class rows; the trunk is `pretrained`
            if start is not None:
                start(fitter)
            else:
                state = setup.model_state()
                fitter.model.embedding.weight.copy_(state["embedding.weight"])
                fitter.model.embedding.bias.copy_(state["embedding.bias"])
                weight = getattr(fitter.loss.criterion, "weight", None)
                if isinstance(weight, torch.Tensor) and weight.shape == (NUM_CLASSES,
                                                                         EMBEDDING_SIZE):
                    weight.copy_(setup.proxies())
        if prepare_fitter is not None:
            prepare_fitter(fitter)

        def sums() -> dict[str, list[float]]:
            return model_checksums(fitter.model, loss_tensors(fitter))

        initial = sums()
        steps: list[tuple[float, dict[str, list[float]]]] = []
        after: list[dict[str, list[float]]] = []

        def feed(batches: list[tuple[torch.Tensor, torch.Tensor]]
                 ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for k, batch in enumerate(batches):
                if k:  # asked for the next batch: the previous step is done (on the CPU)
                    after.append(sums())
                yield batch
            after.append(sums())

        for batches in setup.batches(epochs, steps_per_epoch):
            if keep is not None:
                batches = [(x[list(keep)], y[list(keep)]) for x, y in batches]
            fitter.train_epoch(feed(batches))
            steps.extend(zip(fitter.step_losses, after[-len(batches):]))
            fitter.finish_epoch()
        return initial, steps
    finally:
        fitter.close()


# ---- running the authors' code ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LinePatch:
    """Replace line ``line`` (1-based) of a source file, which must read ``expected`` (stripped),
    by ``replacement`` (indented as the original): a record-time adaptation, listed in the
    trace's provenance."""

    line: int
    expected: str
    replacement: str

    def describe(self, file: str) -> str:
        return f"{file}:{self.line} `{self.expected}` run as `{self.replacement}`"


def import_file(path: Path, name: str, patches: Iterable[LinePatch] = ()) -> types.ModuleType:
    """Import the authors' module at ``path`` as ``name`` (a fresh module object, not cached in
    ``sys.modules`` under their file's own name), with ``patches`` applied to its source text in
    memory (their file is never written)."""
    lines = path.read_text().splitlines(keepends=True)
    for patch in patches:
        original = lines[patch.line - 1]
        if original.strip() != patch.expected:
            raise SystemExit(f"{path}:{patch.line} reads {original.strip()!r}, expected "
                             f"{patch.expected!r}: another commit of the authors' code?")
        indent = original[: len(original) - len(original.lstrip())]
        lines[patch.line - 1] = indent + patch.replacement + "\n"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile("".join(lines), str(path), "exec"), module.__dict__)  # noqa: S102
    return module


@contextlib.contextmanager
def cuda_as_cpu() -> Iterator[None]:
    """While inside, ``Tensor.cuda()`` and ``Module.cuda()`` return their object unchanged: the
    authors' code calls ``.cuda()`` on tensors it creates (proxies, one-hot labels, masks), and
    the traces run on a CPU. Listed as an adaptation by every trace that uses it."""
    tensor_cuda, module_cuda = torch.Tensor.cuda, torch.nn.Module.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.cuda, torch.nn.Module.cuda = tensor_cuda, module_cuda  # type: ignore


# ---- provenance -----------------------------------------------------------------------------
def git_commit(checkout: Path) -> str | None:
    """The checked-out commit of ``checkout`` (read only), or None when it is no git work tree."""
    try:
        out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"],
                             capture_output=True, text=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def provenance(*, repository: str, checkout: Path, expected_commit: str,
               files: Iterable[Path], adaptations: list[str], command: str) -> dict[str, Any]:
    """Where a trace came from: the authors' repository, the commit of ``checkout`` (must be
    ``expected_commit``), the sha256 of each file of theirs that was used, what was adapted to
    run it, the library versions and the command."""
    commit = git_commit(checkout)
    if commit is not None and commit != expected_commit:
        raise SystemExit(f"{checkout} is at {commit}, the traces are defined at "
                         f"{expected_commit}: check that commit out")
    import pytorch_metric_learning

    root = checkout
    return {
        "repository": f"https://github.com/{repository}",
        "commit": commit or f"{expected_commit} (expected; {checkout} is no git work tree)",
        "files": {str(Path(f).resolve().relative_to(root.resolve())): file_sha256(Path(f))
                  for f in files},
        "adaptations": adaptations,
        "command": command,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "pytorch_metric_learning": pytorch_metric_learning.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, CPU, fp32, "
                   f"{torch.get_num_threads()} thread(s), deterministic algorithms",
    }
