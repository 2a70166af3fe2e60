"""MemVir (Ko et al. 2021) step by step: the plain loss before warm-up and with N = 0, which
queued steps become virtual classes, the staircase (and the no-pacing ablation), no gradient into
the queue, the queue inside state_dict, and a real fit that resumes mid-way."""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import ImageSet
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.fit import Fitter
from dmlsearch.trainables.losses import LOSSES
from dmlsearch.trainables.losses import build_loss
from dmlsearch.trainables.losses import resolve_loss_params
from dmlsearch.trainables.losses._class_weights import ClassWeightLoss
from dmlsearch.trainables.losses.memvir import MemVir

WRAPPABLE = [n for n in LOSSES.names() if LOSSES.get(n).supports_memvir]


def _criterion(name: str, num_classes: int = 5, embedding_size: int = 8) -> ClassWeightLoss:
    torch.manual_seed(0)
    bundle = build_loss(name, resolve_loss_params(name, {}), num_classes=num_classes,
                        embedding_size=embedding_size)
    return bundle.criterion


def _step_batch(step: int, batch: int = 6, dim: int = 8, classes: int = 5
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """One training step's batch for the queue: random labels (not class-major, unlike
    ``tests.helpers.embedding_batch``), seeded by the step."""
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(batch, dim, generator=g), torch.randint(0, classes, (batch,), generator=g)


def test_the_wrappable_losses_are_the_class_weight_losses() -> None:
    assert set(WRAPPABLE) == {"norm_softmax", "cosface", "arcface", "curricular_face",
                              "proxy_nca", "proxy_anchor", "thesis_proxy"}
    for name in LOSSES.names():
        is_cw = isinstance(_criterion(name), ClassWeightLoss)
        assert is_cw == (name in WRAPPABLE), name


@pytest.mark.parametrize("name", WRAPPABLE)
def test_plain_loss_exactly_before_warmup_with_n_zero_and_at_the_first_step(name: str) -> None:
    plain = _criterion(name)
    off = MemVir(copy.deepcopy(plain), steps=0, gap=0)
    warming = MemVir(copy.deepcopy(plain), steps=3, gap=1, warmup_epochs=2)
    for epoch in range(2):
        off.start_epoch(epoch)
        warming.start_epoch(epoch)
        for step in range(3):
            emb, labels = _step_batch(10 * epoch + step)
            want = plain(emb, labels)
            assert torch.equal(off(emb, labels), want)
            assert torch.equal(warming(emb, labels), want)
    assert warming.queued_steps() == [] and warming.step == 0
    warming.start_epoch(2)  # warm-up over: step t = 0 has an empty queue, so no virtual class
    emb, labels = _step_batch(99)
    assert torch.equal(warming(emb, labels), plain(emb, labels))
    assert warming.queued_steps() == [0]
    for key, value in plain.state_dict().items():  # CurricularFace's t moved in step
        assert torch.equal(warming.loss.state_dict()[key], value), key


class _Spy(ClassWeightLoss):
    """Records what MemVir passes to loss_from."""

    def __init__(self, **kw: int) -> None:
        super().__init__(**kw)
        self.calls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def loss_from(self, embeddings: torch.Tensor, labels: torch.Tensor,
                  weights: torch.Tensor) -> torch.Tensor:
        self.calls.append((embeddings.detach(), labels.clone(), weights.detach()))
        return (embeddings.sum() + weights.sum()) * 0.0


def test_queue_and_virtual_steps_follow_spec_step_by_step() -> None:
    """N = 3, M = 1: queue of 6 steps; at step t the virtual steps are t-2, t-4, t-6 (if held)."""
    spy = _Spy(num_classes=4, embedding_size=3)
    mem = MemVir(spy, steps=3, gap=1)
    mem.start_epoch(0)
    want_virtual = {0: [], 1: [], 2: [0], 3: [1], 4: [2, 0], 5: [3, 1], 6: [4, 2, 0],
                    7: [5, 3, 1], 8: [6, 4, 2], 9: [7, 5, 3], 10: [8, 6, 4]}
    batches, weights = {}, {}
    for t in range(11):
        assert mem.queued_steps() == list(range(max(0, t - 6), t))
        assert mem.virtual_steps() == want_virtual[t]
        spy.weight.data.fill_(float(t))  # W_t: as if the optimizer had moved it
        weights[t] = spy.weight.detach().clone()
        emb, labels = _step_batch(t, batch=2, dim=3, classes=4)
        batches[t] = (emb, labels)
        mem(emb, labels)
        got_emb, got_labels, got_w = spy.calls[-1]
        blocks = [t] + want_virtual[t]
        assert got_emb.shape == (2 * len(blocks), 3) and got_w.shape == (4 * len(blocks), 3)
        assert torch.equal(got_emb[:2], emb) and torch.equal(got_labels[:2], labels)
        assert torch.equal(got_w[:4], weights[t])
        for j, s in enumerate(want_virtual[t], start=1):
            rows = slice(2 * j, 2 * j + 2)
            assert torch.equal(got_emb[rows], F.normalize(batches[s][0], dim=1))
            assert torch.equal(got_labels[rows], batches[s][1] + 4 * j)
            assert torch.equal(got_w[4 * j: 4 * j + 4], weights[s])  # W before step s's update
    assert mem.step == 11 and len(mem.queued_steps()) == mem.capacity == 6


@pytest.mark.parametrize("pacing", [True, False])
def test_number_of_virtual_classes_is_a_staircase_after_warmup(pacing: bool) -> None:
    n, m, per_epoch = 4, 2, 5
    mem = MemVir(_Spy(num_classes=3, embedding_size=2), steps=n, gap=m, warmup_epochs=2,
                 step_pacing=pacing)
    counts = []
    for epoch in range(6):
        mem.start_epoch(epoch)
        for i in range(per_epoch):
            counts.append(len(mem.virtual_steps()))
            mem(*_step_batch(epoch * per_epoch + i, batch=2, dim=2, classes=3))
    warm = 2 * per_epoch
    assert counts[:warm] == [0] * warm  # warm-up: plain loss
    after = counts[warm:]
    if pacing:  # one more virtual step every M+1 steps, until N
        assert after == [min(n, t // (m + 1)) for t in range(len(after))]
    else:  # nothing until the queue holds all N selected steps, then all N at once
        assert after == [0 if t < n * (m + 1) else n for t in range(len(after))]
    assert after[:13] == ([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4] if pacing
                          else [0] * 12 + [4])


def test_no_gradient_reaches_queued_tensors() -> None:
    crit = _criterion("proxy_anchor")
    mem = MemVir(crit, steps=2, gap=0)
    mem.start_epoch(0)
    for t in range(5):
        emb = _step_batch(t)[0].requires_grad_()
        loss = mem(emb, _step_batch(t)[1])
        loss.backward()  # a queued tensor tied to an old graph would fail here
        assert emb.grad is not None and crit.weight.grad is not None
        crit.weight.grad = None
    assert mem.virtual_steps() == [4, 3]
    for entry in mem._queue:
        for tensor in (entry.embeddings, entry.labels, entry.weights):
            assert not tensor.requires_grad and tensor.grad_fn is None and tensor.grad is None
        assert entry.weights.data_ptr() != crit.weight.data_ptr()  # a copy, not a view


@pytest.mark.parametrize("name", ["norm_softmax", "curricular_face", "proxy_anchor"])
def test_state_dict_round_trip_gives_the_identical_next_loss(name: str) -> None:
    mem = MemVir(_criterion(name), steps=3, gap=1, warmup_epochs=1)
    for epoch in range(2):
        mem.start_epoch(epoch)
        for i in range(4):
            mem(*_step_batch(10 * epoch + i))
    buffer = io.BytesIO()
    torch.save(mem.state_dict(), buffer)  # what a checkpoint does
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    torch.manual_seed(123)
    fresh = MemVir(build_loss(name, resolve_loss_params(name, {}), num_classes=5,
                              embedding_size=8).criterion, steps=3, gap=1, warmup_epochs=1)
    fresh.load_state_dict(state)
    assert (fresh.epoch, fresh.step) == (1, 4)
    assert fresh.queued_steps() == mem.queued_steps() == [0, 1, 2, 3]
    assert fresh.virtual_steps() == mem.virtual_steps() == [2, 0]
    emb, labels = _step_batch(50)
    assert torch.equal(fresh(emb, labels), mem(emb, labels))
    assert fresh.queued_steps() == mem.queued_steps()


def test_config_validates_memvir_settings() -> None:
    cfg = TrialConfig.from_flat({"loss": "norm_softmax", "memvir_n": 45, "memvir_m": 10,
                                 "memvir_warmup_epochs": 40, "memvir_step_pacing": "false"})
    assert (cfg.memvir_n, cfg.memvir_m, cfg.memvir_warmup_epochs) == (45, 10, 40)
    assert cfg.memvir_step_pacing is False
    assert TrialConfig.from_flat(cfg.to_flat()) == cfg
    with pytest.raises(UserError, match=r"memvir_n > 0 needs a loss with class weights/proxies"
                                        r".*multi_similarity.*norm_softmax") as caught:
        TrialConfig.from_flat({"loss": "multi_similarity", "memvir_n": 3})
    assert "\n" not in str(caught.value)
    for key in ("memvir_n", "memvir_m", "memvir_warmup_epochs"):
        with pytest.raises(UserError, match=key):
            TrialConfig.from_flat({"loss": "proxy_anchor", key: -1})


# ---- a real fit --------------------------------------------------------------------------------


def _tiny_sets() -> tuple[ImageSet, ImageSet]:
    """12 classes of 8 random 32×32 grey images: 8 classes train, 4 validate."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(12), 8)
    protos = rng.integers(0, 256, size=(12, 1, 32, 32))
    noise = rng.integers(-40, 40, size=(len(labels), 1, 32, 32))
    images = torch.from_numpy(np.clip(protos[labels] + noise, 0, 255).astype(np.uint8))
    data = ImageSet(images=images, labels=labels, class_names=[f"c{i}" for i in range(12)])
    return data.select_classes(np.arange(8)), data.select_classes(np.arange(8, 12))


def test_fit_with_memvir_runs_and_resumes_mid_way() -> None:
    train, val = _tiny_sets()
    cfg = TrialConfig.from_flat({
        "loss": "norm_softmax", "memvir_n": 2, "memvir_m": 1, "memvir_warmup_epochs": 1,
        "epochs": 3, "batch_size": 16, "m_per_class": 4, "embedding_size": 16,
        "lr": 1e-3, "threads": 2, "lr_schedule": "step", "lr_step_size": 10,
        "device": "cpu",  # bit-exact on the CPU (cuDNN is not deterministic)
    })
    full_fitter = Fitter(cfg, train, val)
    assert isinstance(full_fitter.loss.criterion, MemVir)
    seen: list[tuple[int, list[int]]] = []
    states: list[dict] = []

    def on_epoch(report, state):  # type: ignore[no-untyped-def]
        seen.append((full_fitter.loss.criterion.step, full_fitter.loss.criterion.queued_steps()))
        if report.epoch == 2:
            states.append(state())

    full = full_fitter.run(on_epoch).history
    steps_per_epoch = len(train) // 16
    # Epoch 1 is warm-up (no queue); epochs 2-3 queue every step (capacity N(M+1) = 4).
    assert seen[0] == (0, [])
    assert seen[1][0] == steps_per_epoch and seen[2][0] == 2 * steps_per_epoch
    assert seen[2][1] == list(range(2 * steps_per_epoch - 4, 2 * steps_per_epoch))
    assert all(np.isfinite(row["train_loss"]) for row in full)

    resumed = Fitter(cfg, train, val, seed=999)
    resumed.load_state_dict(states[0])
    assert resumed.loss.criterion.queued_steps() == seen[1][1]
    last: list[list[int]] = []
    history = resumed.run(
        lambda report, state: last.append(resumed.loss.criterion.queued_steps())).history
    assert last == [seen[2][1]]  # the resumed epoch 3 queued the same steps
    assert len(history) == 3
    for a, b in zip(full, history):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], abs=1e-6), key
