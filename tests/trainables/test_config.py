from __future__ import annotations

import pytest

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.config import setting_names
from dmlsearch.trainables.errors import UserError


def test_defaults_round_trip_through_flat() -> None:
    cfg = TrialConfig.from_flat({})
    assert TrialConfig.from_flat(cfg.to_flat()) == cfg
    flat = cfg.to_flat()
    assert flat["loss"] == "multi_similarity"
    # Table 4 defaults of the default loss are filled in and exported.
    assert flat["loss.margin"] == 0.5 and flat["loss.alpha"] == 2.0
    assert flat["loss.beta"] == 50.0 and flat["loss.epsilon"] == 0.1


def test_strings_from_the_command_line_are_coerced() -> None:
    cfg = TrialConfig.from_flat({"epochs": "3", "lr": "1e-3", "freeze_bn": "stats",
                                 "loss": "proxy_anchor", "loss.alpha": "16"})
    assert cfg.epochs == 3 and cfg.lr == 1e-3 and cfg.freeze_bn == "stats"
    assert cfg.loss_params == {"margin": 0.1, "alpha": 16.0, "lr_mult": 100.0, "lr": 0.0}


@pytest.mark.parametrize(("given", "meant"), [(True, "all"), ("true", "all"), ("yes", "all"),
                                              (False, "off"), ("false", "off"), ("off", "off")])
def test_freeze_bn_as_a_boolean_means_what_it_meant_before_it_had_three_values(
    given: object, meant: str
) -> None:
    """Exports written when freeze_bn was a boolean (true: eval-mode BN with frozen affine
    parameters) train as they did."""
    assert TrialConfig.from_flat({"freeze_bn": given}).freeze_bn == meant


def test_an_exported_absolute_proxy_lr_still_fixes_the_proxies_rate() -> None:
    """loss.lr in an export written before proxy_anchor had lr_mult keeps its learning rate:
    > 0 fixes the proxies' rate whatever lr is; 0 (the default) means lr x lr_mult."""
    from dmlsearch.trainables.losses import build_loss

    for loss in ("proxy_anchor", "thesis_proxy"):
        for lr in (2e-4, 3e-3):
            cfg = TrialConfig.from_flat({"loss": loss, "lr": lr, "loss.lr": 1e-2})
            bundle = build_loss(loss, cfg.loss_params, num_classes=3, embedding_size=4)
            assert bundle.lr_for(cfg.lr) == 1e-2
            plain = TrialConfig.from_flat({"loss": loss, "lr": lr})
            bundle = build_loss(loss, plain.loss_params, num_classes=3, embedding_size=4)
            assert bundle.lr_for(plain.lr) == pytest.approx(100 * lr)


@pytest.mark.parametrize(
    ("flat", "needle"),
    [
        ({"epoch": 3}, "unknown setting 'epoch'"),
        ({"epochs": "three"}, "epochs must be an integer"),
        ({"epochs": 0}, "epochs must be an integer >= 1"),
        ({"lr": -1}, "lr must be a number > 0"),
        ({"val_ratio": 1.5}, "strictly between 0 and 1"),
        ({"protocol": "holdout"}, "one of fixed, kfold"),
        ({"loss": "nope"}, "unknown loss 'nope'"),
        ({"loss.gamma": 3}, "has no parameter loss.gamma"),
        ({"batch_size": 30, "m_per_class": 4}, "multiple of m_per_class"),
        ({"freeze_bn": "maybe"}, "freeze_bn must be one of off, stats, all"),
        ({"head_warmup_epochs": -1}, "head_warmup_epochs must be an integer >= 0"),
        ({"adam_eps": 0}, "adam_eps must be a number > 0"),
        ({"lr": float("nan")}, "finite"),
        ({"nesterov": True, "momentum": 0}, "nesterov needs momentum > 0"),
        ({"precision": "fp8"}, "one of auto, fp32, bf16, fp16"),
        ({"checkpoint_every": 0}, "checkpoint_every must be an integer >= 1"),
        ({"cache_limit_gb": -1}, "cache_limit_gb must be a number >= 0"),
        ({"cache": " "}, "cache must be auto, shm, off or a folder"),
    ],
)
def test_bad_settings_are_user_errors(flat: dict, needle: str) -> None:
    with pytest.raises(UserError, match=needle.replace("(", r"\(")):
        TrialConfig.from_flat(flat)


def test_unknown_setting_lists_valid_ones() -> None:
    with pytest.raises(UserError) as info:
        TrialConfig.from_flat({"learning_rate": 1e-3})
    for name in setting_names():
        assert name in str(info.value)
