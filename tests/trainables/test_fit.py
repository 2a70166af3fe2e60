"""The fit loop on real (built-in) data: it learns, it resumes exactly, a NaN fails the trial."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from dmlsearch.trainables.errors import TrialFailed
from dmlsearch.trainables.fit import Fitter
from dmlsearch.trainables.metrics.evaluate import evaluate
from tests.helpers import small_config


@pytest.mark.parametrize("loss", ["multi_similarity", "proxy_anchor"])
def test_training_beats_the_untrained_model(split, loss: str) -> None:  # type: ignore[no-untyped-def]
    train, val = split
    fitter = Fitter(small_config(loss=loss), train, val)
    before = evaluate(fitter.model, val, device=fitter.device)["recall@1"]
    result = fitter.run()
    assert result.best_value is not None and result.best_epoch is not None
    assert result.best_value > before + 0.15, (before, result.best_value)
    assert result.best_metrics["recall@1"] == result.best_value
    assert len(result.history) == 3
    # The returned model carries the best epoch's weights.
    again = evaluate(result.model, val, device=fitter.device)["recall@1"]
    assert again == pytest.approx(result.best_value, abs=1e-6)


def test_resume_from_state_equals_an_uninterrupted_fit(split) -> None:  # type: ignore[no-untyped-def]
    train, val = split
    # Bit-exact on the CPU; cuDNN's kernels are not deterministic run to run.
    cfg = small_config(epochs=3, loss="proxy_anchor", device="cpu")
    states: list[dict] = []  # the uninterrupted fit's state after epoch 1
    full = Fitter(cfg, train, val).run(
        lambda report, state: states.append(state()) if report.epoch == 1 else None).history
    resumed = Fitter(cfg, train, val, seed=12345)  # a different seed: the state must win
    resumed.load_state_dict(states[0])
    history = resumed.run().history
    assert len(history) == 3
    for a, b in zip(full, history):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], abs=1e-6), key


def test_patience_stops_early_and_reports_last(split) -> None:  # type: ignore[no-untyped-def]
    train, val = split
    reports = []
    fitter = Fitter(small_config(epochs=6, lr=1e-9, patience=1), train, val)
    result = fitter.run(lambda report, state: reports.append(report))
    assert result.stopped_early and result.epochs_run < 6
    assert reports[-1].last and not any(r.last for r in reports[:-1])


def test_a_nan_loss_fails_the_trial_with_its_reason(split) -> None:  # type: ignore[no-untyped-def]
    train, val = split
    fitter = Fitter(small_config(), train, val)

    class NanLoss(torch.nn.Module):
        def forward(self, emb: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            return emb.sum() * float("nan")

    fitter.loss.criterion, fitter.loss.miner = NanLoss(), None
    with pytest.raises(TrialFailed, match=r"loss became nan at epoch 1, step 1"):
        fitter.run()


def test_same_seed_same_numbers(split) -> None:  # type: ignore[no-untyped-def]
    train, val = split
    cfg = small_config(epochs=1, device="cpu")  # bit-exact on the CPU (cuDNN is not deterministic)
    a = Fitter(cfg, train, val).run().history
    b = Fitter(cfg, train, val).run().history
    assert a == b
    assert np.isfinite(a[0]["train_loss"])


def test_bf16_and_channels_last_train_on_cpu(split) -> None:  # type: ignore[no-untyped-def]
    train, val = split
    plain = Fitter(small_config(epochs=1), train, val).run()
    mixed = Fitter(small_config(epochs=1, precision="bf16", channels_last=True), train, val).run()
    assert np.isfinite(mixed.history[0]["train_loss"])
    # Same seed, lower precision: close to fp32, not identical (bf16 has an 8-bit mantissa).
    assert mixed.history[0]["train_loss"] != plain.history[0]["train_loss"]
    assert mixed.history[0]["train_loss"] == pytest.approx(plain.history[0]["train_loss"],
                                                            rel=0.2)
    assert mixed.best_value is not None and mixed.best_value > 0.3


def test_the_epoch_measures_its_wait_for_data(split) -> None:  # type: ignore[no-untyped-def]
    train, _ = split
    fitter = Fitter(small_config(epochs=1), train, None)
    assert fitter.train_seconds == fitter.data_wait_seconds == 0.0
    inner = fitter.train_loader.epoch
    batches: list[int] = []

    def slow_epoch(order, index=None):  # type: ignore[no-untyped-def]
        for batch in inner(order, index=index):
            time.sleep(0.02)  # a loader that makes the loop wait 20 ms a batch
            batches.append(1)
            yield batch

    fitter.train_loader.epoch = slow_epoch  # type: ignore[method-assign]
    fitter.train_epoch()
    assert len(batches) > 0
    assert 0.02 * len(batches) <= fitter.data_wait_seconds < fitter.train_seconds
    fitter.close()


@pytest.mark.parametrize("loss", ["proxy_anchor", "proxy_nca", "soft_triple", "norm_softmax"])
def test_class_weights_exist_for_the_training_classes_only(split, loss: str) -> None:  # type: ignore[no-untyped-def]
    """A trial's loss has one weight row (proxy) per class it trains on: the validation classes
    get none (they would only ever be pushed away), as in the retrain and the reference code."""
    train, val = split
    fitter = Fitter(small_config(loss=loss, batch_sampler="m_per_class"), train, val)
    train_classes = np.unique(train.labels)
    assert not set(train_classes) & set(np.unique(val.labels))
    criterion = fitter.loss.criterion
    assert criterion.num_classes == len(train_classes)
    rows = criterion.fc.shape[1] if loss == "soft_triple" else criterion.weight.shape[0]
    assert rows == len(train_classes) * getattr(criterion, "centers_per_class", 1)
    # Training labels reach the loss as 0..C-1 in class order.
    images, labels = next(iter(fitter.train_loader.epoch([np.arange(8)])))
    mapped = fitter.label_index[labels]
    expected = np.searchsorted(train_classes, labels.numpy())
    assert mapped.tolist() == expected.tolist()
    fitter.close()
