"""What a trial's recipe does to its trunk in each epoch: frozen BatchNorm and head-only warm-up.

Both follow the sources' code, which fine-tunes ImageNet-pretrained trunks:

- **Frozen BatchNorm** (``freeze_bn``). The thesis code, Proxy-Anchor's code, the MS code and
  MemVir's code all put the trunk's BatchNorm layers in eval mode at the start of every epoch,
  so a batch is normalised with the pretrained running statistics and never updates them
  (thesis ``train.py`` and Proxy-Anchor ``code/train.py``: the ``bn_freeze`` block of the epoch
  loop; MS ``ret_benchmark/engine/trainer.py`` with ``utils/freeze_bn.py``; MemVir ``main.py``
  ``train()`` under ``--freeze_BN``). Their affine weight and bias still train: the MS and MemVir
  code never stop them, and the thesis and Proxy-Anchor models' constructors do stop them but
  their warm-up sets ``requires_grad`` back on for every trunk parameter when it ends (epoch
  ``--warm``, every published command). ``stats`` is that; ``all`` also keeps the affine
  parameters frozen (what those constructors meant, reached there only with ``--warm 0``).
- **Head-only warm-up** (``head_warmup_epochs``). For the first epochs only the new layers
  learn: the embedding layer and the loss's own parameters (proxies); every other parameter has
  ``requires_grad`` off, so it gets no gradient and the optimizer leaves it alone (no update, no
  weight decay, no Adam moments). Thesis ``train.py --warm 1``; Proxy-Anchor ``--warm 1``
  (BNInception) and ``--warm 5`` (ResNet50). The learning-rate schedule counts these epochs.

Both only mean something for a pretrained trunk. A trunk trained from scratch
(``pretrained: none``, e.g. the previews on the built-in data) has random running statistics,
which frozen BN would normalise with forever, and a random trunk that is not trained for the
first epochs only wastes them; so for such a trunk both are off, whatever the settings say
(:func:`effective_freeze_bn`, :func:`effective_head_warmup`; :func:`inert_settings` names them for
the trial's log, and ``dmlsearch spaces show`` says it on the recipe card).
"""

from __future__ import annotations

from torch import nn

from dmlsearch.trainables.config import TrialConfig

__all__ = [
    "FREEZE_BN_MEANINGS",
    "effective_freeze_bn",
    "effective_head_warmup",
    "inert_settings",
    "set_epoch_mode",
]

FREEZE_BN_MEANINGS: dict[str, str] = {
    "off": "BatchNorm trains as usual (batch statistics, running statistics updated)",
    "stats": "BatchNorm in eval mode: the pretrained running statistics normalise every batch "
             "and are never updated; its affine weight and bias train",
    "all": "BatchNorm in eval mode and its affine weight and bias never trained",
}


def _from_scratch(cfg: TrialConfig) -> bool:
    return cfg.pretrained == "none"


def effective_freeze_bn(cfg: TrialConfig) -> str:
    """``cfg.freeze_bn``, or ``off`` for a trunk trained from scratch."""
    return "off" if _from_scratch(cfg) else cfg.freeze_bn


def effective_head_warmup(cfg: TrialConfig) -> int:
    """``cfg.head_warmup_epochs``, or 0 for a trunk trained from scratch."""
    return 0 if _from_scratch(cfg) else cfg.head_warmup_epochs


def inert_settings(cfg: TrialConfig) -> list[str]:
    """The recipe settings that ``cfg`` gives but that do nothing for its trunk, as
    ``name=value`` (empty for a pretrained trunk, or when neither is set)."""
    if not _from_scratch(cfg):
        return []
    given = [f"freeze_bn={cfg.freeze_bn}"] if cfg.freeze_bn != "off" else []
    if cfg.head_warmup_epochs:
        given.append(f"head_warmup_epochs={cfg.head_warmup_epochs}")
    return given


def _batchnorms(module: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def set_epoch_mode(model: nn.Module, cfg: TrialConfig, epoch: int) -> None:
    """Put ``model`` (an ``EmbeddingNet``: ``trunk`` + ``embedding``) in its training mode for
    0-based ``epoch``: train mode, the trunk's BatchNorm frozen as :func:`effective_freeze_bn`
    says, and the trunk's parameters trainable unless the head-only warm-up is still on.

    Called at the start of every training epoch (it is idempotent), so a fit resumed from a
    checkpoint at any epoch trains exactly as the uninterrupted one.
    """
    model.train()
    freeze = effective_freeze_bn(cfg)
    warming = epoch < effective_head_warmup(cfg)
    trunk = model.trunk
    for param in trunk.parameters():
        param.requires_grad_(not warming)
    for bn in _batchnorms(trunk):
        if freeze != "off":
            bn.eval()
        if freeze == "all":
            for param in bn.parameters():
                param.requires_grad_(False)
