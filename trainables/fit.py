"""Fit one model on one (train, validation) split: the loop every trial and retrain runs.

Plain PyTorch. Progress goes out through a callback, which also gets a function returning the
full resumable state, so a caller (the Ray adapter, a test) can checkpoint without knowing what
the state holds. Model selection uses the validation classes only: the best epoch's weights are
kept, and a ``patience`` of n evaluations without improvement stops the fit early.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import random
import time
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import AnyImageSet
from dmlsearch.trainables.data import BatchLoader
from dmlsearch.trainables.data import dataset_info
from dmlsearch.trainables.device import autocast_dtype
from dmlsearch.trainables.device import resolve_channels_last
from dmlsearch.trainables.device import resolve_device
from dmlsearch.trainables.device import resolve_precision
from dmlsearch.trainables.errors import TrialFailed
from dmlsearch.trainables.input_kinds import input_kind
from dmlsearch.trainables.losses import build_loss
from dmlsearch.trainables.losses.memvir import with_memvir
from dmlsearch.trainables.metrics.evaluate import evaluate
from dmlsearch.trainables.metrics.evaluate import verification_options
from dmlsearch.trainables.metrics.names import ks_for_metric
from dmlsearch.trainables.metrics.names import metric_mode
from dmlsearch.trainables.models import EmbeddingNet
from dmlsearch.trainables.models import build_model
from dmlsearch.trainables.models import prepare_input
from dmlsearch.trainables.optim import LR_SCHEDULES
from dmlsearch.trainables.optim import build_optimizer
from dmlsearch.trainables.optim import build_scheduler
from dmlsearch.trainables.optim import param_groups
from dmlsearch.trainables.optim import step_scheduler
from dmlsearch.trainables.recipe import inert_settings
from dmlsearch.trainables.recipe import set_epoch_mode
from dmlsearch.trainables.sampling import make_batches
from dmlsearch.trainables.threads import pin as pin_threads

__all__ = ["EpochReport", "FitResult", "Fitter", "seed_everything"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EpochReport:
    """What one epoch produced. ``metrics`` are validation metrics (empty if not evaluated)."""

    epoch: int
    train_loss: float
    metrics: dict[str, float]
    best_value: float | None
    best_epoch: int | None
    seconds: float
    last: bool  # no epoch follows (the planned last one, or patience ran out)


@dataclasses.dataclass
class FitResult:
    model: EmbeddingNet  # the best epoch's weights when validated, else the last epoch's
    best_value: float | None
    best_epoch: int | None
    best_metrics: dict[str, float]
    history: list[dict[str, float]]
    epochs_run: int
    stopped_early: bool


EpochCallback = Callable[[EpochReport, Callable[[], dict[str, Any]]], None]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _weights_only(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of ``module``'s parameters and buffers, without extra state (MemVir's queue:
    hundreds of MB for the paper's recipes, and only training needs it)."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()
            if not k.endswith("_extra_state")}


def to_host(value: Any) -> Any:
    """A copy of ``value`` whose tensors are on the CPU (nested dicts, lists and tuples).

    A snapshot of the training state for a checkpoint: device tensors are copied out (one
    synchronisation at the end, not one per tensor), and nothing shares memory with the live
    state, so training may go on while the copy is written to disk.
    """
    synchronize = []

    def snapshot(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            if item.device.type == "cuda":
                synchronize.append(item.device)
                host = torch.empty(item.shape, dtype=item.dtype, pin_memory=True)
                return host.copy_(item.detach(), non_blocking=True)
            return item.detach().clone()
        if isinstance(item, dict):
            return {k: snapshot(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return type(item)(snapshot(v) for v in item)
        return copy.deepcopy(item)

    out = snapshot(value)
    for device in set(synchronize):
        torch.cuda.synchronize(device)
    return out


class Fitter:
    """Owns the model, loss, optimizer, schedule and RNG of one fit; resumable from state."""

    def __init__(
        self, cfg: TrialConfig, train: AnyImageSet, val: AnyImageSet | None, *,
        seed: int | None = None, keep_best: bool = True,
    ) -> None:
        self.cfg, self.train, self.val = cfg, train, val
        # Whether the best epoch's weights are kept (in memory, and in checkpoints) so that the
        # fit ends with them: a search trial needs them only when it uses its model afterwards.
        self.keep_best = keep_best
        self.device = resolve_device(cfg.device)
        # The CPU thread team this fit computes with: fixed before the first step and recorded
        # (0: the count the process has now); a GPU fit changes it only when asked (threads.py).
        self.threads: int | None = None
        if cfg.threads or self.device.type == "cpu":
            self.threads = pin_threads(cfg.threads)
        seed = cfg.seed if seed is None else seed
        seed_everything(seed)
        self.rng = np.random.default_rng(seed)
        self.ks = ks_for_metric(cfg.metric, dataset_info(cfg.dataset).recall_ks)
        self.mode = metric_mode(cfg.metric)  # "min": lower is better (EER)
        inert = inert_settings(cfg)
        if inert:
            log.info("%s: no effect on a trunk trained from scratch (pretrained none): its "
                     "BatchNorm learns its statistics and it trains from the first epoch",
                     ", ".join(inert))
        self.model = build_model(
            backbone=cfg.backbone, in_channels=train.channels,
            embedding_size=cfg.embedding_size, pooling=cfg.pooling,
            pretrained=cfg.pretrained,
        ).to(self.device)
        # What "auto" means here: bf16 and channels-last on a GPU, fp32 NCHW on a CPU.
        self.precision = resolve_precision(cfg.precision, self.device)
        self.channels_last = resolve_channels_last(cfg.channels_last, self.device) and \
            input_kind(train.input_kind).pixels  # a memory format of [B, C, H, W] pixels
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        if self.device.type == "cuda":  # fixed input sizes: let cuDNN pick its fastest kernels
            torch.backends.cudnn.benchmark = True
        self.amp_dtype = autocast_dtype(self.precision)
        # fp16 needs loss scaling against gradient underflow; bf16 keeps fp32's exponent range.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        # The training forward, compiled on request (the module and its weights are shared).
        self.forward = torch.compile(self.model) if cfg.compile else self.model
        # Class weights (proxies) exist for the classes this fit trains on, and no others: the
        # loss sees labels 0..C-1 (the training classes in sorted order). Sized for the whole
        # label space, a search's trials would give its validation classes proxies that are
        # only ever pushed away (and Proxy-Anchor would average over them): not the loss of
        # the retrain or of the reference code, which train on the training classes alone.
        classes = np.unique(train.labels)
        self.label_index = torch.full((int(classes.max()) + 1,), -1, dtype=torch.long)
        self.label_index[torch.from_numpy(classes)] = torch.arange(len(classes))
        self.label_index = self.label_index.to(self.device)
        self.loss = build_loss(cfg.loss, cfg.loss_params, num_classes=len(classes),
                               embedding_size=cfg.embedding_size, miner=cfg.miner,
                               miner_params=cfg.miner_params)
        if cfg.memvir_n:  # MemVir around the loss's class weights (Ko et al. 2021)
            self.loss = with_memvir(self.loss, loss=cfg.loss, steps=cfg.memvir_n,
                                    gap=cfg.memvir_m, warmup_epochs=cfg.memvir_warmup_epochs,
                                    step_pacing=cfg.memvir_step_pacing)
        self.loss.criterion.to(self.device)
        self.eval_options = {**verification_options(cfg, self.loss.criterion),
                             "amp_dtype": self.amp_dtype}
        groups = param_groups(self.model, self.loss.parameters(), self.loss.lr_for(cfg.lr),
                              cfg)
        self.optimizer = build_optimizer(groups, cfg)
        self.scheduler = build_scheduler(self.optimizer, cfg)
        self.step_schedule = LR_SCHEDULES.get(cfg.lr_schedule).per_step  # after every step
        pin = self.device.type == "cuda"
        self.train_loader = BatchLoader(train, train=True, workers=cfg.workers, pin_memory=pin,
                                        device=self.device)
        self.val_loader = None if val is None else BatchLoader(
            val, train=False, workers=cfg.workers, pin_memory=pin, device=self.device)
        self.epoch = 0
        self.best_value: float | None = None
        self.best_epoch: int | None = None
        self.best_metrics: dict[str, float] = {}
        self.best_weights: dict[str, torch.Tensor] | None = None
        # The loss's own weights at the best epoch (E2E's distance model D scores with them).
        self.best_loss_weights: dict[str, torch.Tensor] | None = None
        self.history: list[dict[str, float]] = []
        self.stale = 0
        # The last training pass: its wall time and the part spent waiting for the next batch
        # (decoding when workers=0, an empty worker queue otherwise); benchmarks/input_pipeline.py.
        self.train_seconds = 0.0
        self.data_wait_seconds = 0.0
        self.step_losses: list[float] = []  # the last training pass's, step by step

    # ---- state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A snapshot on the host (:func:`to_host`): later training does not change what was
        returned, and it can be written while training goes on."""
        return to_host({
            "model": self.model.state_dict(),
            "loss": self.loss.criterion.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": self.rng.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
            "epoch": self.epoch,
            "best_value": self.best_value,
            "best_epoch": self.best_epoch,
            "best_metrics": dict(self.best_metrics),
            "best_weights": self.best_weights,
            "best_loss_weights": self.best_loss_weights,
            "history": list(self.history),
            "stale": self.stale,
        })

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.loss.criterion.load_state_dict(state["loss"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        self.epoch = state["epoch"]
        self.best_value, self.best_epoch = state["best_value"], state["best_epoch"]
        self.best_metrics = dict(state["best_metrics"])
        self.best_weights = state["best_weights"]
        self.best_loss_weights = state.get("best_loss_weights")
        self.history = list(state["history"])
        self.stale = state["stale"]

    # ---- loop --------------------------------------------------------------------------
    def begin_epoch(self) -> None:
        """Set up epoch ``self.epoch`` (0-based) for training: train mode, the trunk's BatchNorm
        frozen and the head-only warm-up as the recipe says (:mod:`trainables.recipe`), and the
        loss told which epoch starts (MemVir's warm-up)."""
        set_epoch_mode(self.model, self.cfg, self.epoch)
        self.loss.start_epoch(self.epoch)

    def train_epoch(
        self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None
    ) -> float:
        """Train epoch ``self.epoch`` (0-based) and return its mean loss; each step's loss is
        then in :attr:`step_losses`. ``batches``: (uint8 images, dataset labels) pairs to train
        on instead of the sampled ones (the reference traces feed fixed batches)."""
        cfg = self.cfg
        self.begin_epoch()
        if batches is None:
            order = make_batches(cfg.batch_sampler, self.train.labels,
                                 batch_size=cfg.batch_size, m=cfg.m_per_class, rng=self.rng)
            batches = self.train_loader.epoch(order, index=self.epoch)
        # The loss is summed on the device and each step's is checked for NaN/inf one step
        # late: reading it at once would make the host wait for the GPU every step, and the
        # GPU idle while the host queues the next step (measured: docs/benchmarks.md, GPU).
        losses: list[torch.Tensor] = []
        pending = None
        started = ready = time.perf_counter()
        waited = 0.0
        for step, (images, labels) in enumerate(batches):
            waited += time.perf_counter() - ready
            loss = self.train_step(images, labels)
            if pending is not None:
                self._check_finite(*pending)
            pending = (loss, step)
            losses.append(loss)
            ready = time.perf_counter()
        if pending is not None:
            self._check_finite(*pending)
        self.train_seconds = time.perf_counter() - started
        self.data_wait_seconds = waited
        # One transfer for the whole epoch (the host never waits for the GPU inside it).
        self.step_losses = torch.stack(losses).double().tolist() if losses else []
        return sum(self.step_losses) / max(len(self.step_losses), 1)

    def finish_epoch(self, metrics: dict[str, float] | None = None) -> None:
        """End epoch ``self.epoch``: count it and step the learning-rate schedule (after the
        evaluation whose ``metrics`` a plateau schedule reads)."""
        self.epoch += 1
        step_scheduler(self.scheduler, self.cfg, metrics or {})

    def _check_finite(self, loss: torch.Tensor, step: int) -> None:
        if not bool(torch.isfinite(loss)):
            raise TrialFailed(
                f"loss became {loss.item()} at epoch {self.epoch + 1}, step {step + 1} "
                f"(lr {self.cfg.lr:g}); the trial stops here"
            )

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One optimisation step on a batch of raw pixels; returns the batch's loss (detached,
        on the device: reading it waits for the GPU). A non-finite loss is the caller's to check.
        """
        cfg = self.cfg
        x = prepare_input(self.model, images, self.device)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        y = self.label_index[labels.to(self.device, non_blocking=True)]
        with torch.autocast(self.device.type, dtype=self.amp_dtype,
                            enabled=self.amp_dtype is not None):
            embeddings = self.forward(x)
        loss = self.loss(embeddings.float(), y)  # losses and miners in fp32
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if cfg.grad_clip or cfg.grad_clip_norm:
            self.scaler.unscale_(self.optimizer)
            params = [p for g in self.optimizer.param_groups for p in g["params"]]
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_value_(params, cfg.grad_clip)
            if cfg.grad_clip_norm:
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.step_schedule:
            self.scheduler.step()
        return loss.detach()

    def _after_eval(self, metrics: dict[str, float], *, epoch: int) -> None:
        value = metrics[self.cfg.metric]
        if self.best_value is None or (
            value < self.best_value if self.mode == "min" else value > self.best_value
        ):
            self.best_value, self.best_epoch = value, epoch
            self.best_metrics = dict(metrics)
            if self.keep_best:
                self.best_weights = copy.deepcopy(self.model.state_dict())
                self.best_loss_weights = _weights_only(self.loss.criterion)
            self.stale = 0
        else:
            self.stale += 1

    def close(self) -> None:
        """Stop data-loading workers (also done at the end of :meth:`run`)."""
        self.train_loader.close()
        if self.val_loader is not None:
            self.val_loader.close()

    def run(self, on_epoch: EpochCallback | None = None) -> FitResult:
        try:
            return self._run(on_epoch)
        finally:
            self.close()

    def _run(self, on_epoch: EpochCallback | None) -> FitResult:
        cfg, stopped_early = self.cfg, False
        while self.epoch < cfg.epochs:
            started = time.perf_counter()
            train_loss = self.train_epoch()
            metrics: dict[str, float] = {}
            done = self.epoch + 1
            if self.val is not None and (done % cfg.eval_every == 0 or done == cfg.epochs):
                metrics = evaluate(self.model, self.val, device=self.device, ks=self.ks,
                                   loader=self.val_loader, **self.eval_options)
                self._after_eval(metrics, epoch=done)
            self.finish_epoch(metrics)  # after eval: a plateau schedule needs the metric
            row = {"epoch": float(self.epoch), "train_loss": train_loss, **metrics}
            self.history.append(row)
            stopped_early = bool(cfg.patience and metrics and self.stale >= cfg.patience)
            report = EpochReport(
                epoch=self.epoch, train_loss=train_loss, metrics=metrics,
                best_value=self.best_value, best_epoch=self.best_epoch,
                seconds=time.perf_counter() - started,
                last=stopped_early or self.epoch >= cfg.epochs,
            )
            log.debug("epoch %d: %s", self.epoch, row)
            if on_epoch is not None:
                on_epoch(report, self.state_dict)
            if stopped_early:
                break
        if self.best_weights is not None:
            self.model.load_state_dict(self.best_weights)
        if self.best_loss_weights is not None:  # MemVir's queue stays as training left it
            self.loss.criterion.load_state_dict(self.best_loss_weights, strict=False)
        return FitResult(
            model=self.model, best_value=self.best_value, best_epoch=self.best_epoch,
            best_metrics=self.best_metrics, history=self.history, epochs_run=self.epoch,
            stopped_early=stopped_early,
        )
