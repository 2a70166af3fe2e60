"""The decorators a plug-in uses to add its own parts (``import dmlsearch``, then
``@dmlsearch.register_loss(...)``). Each wraps the user's plain function into the registry
entry dmlsearch's own parts use, so a plug-in's loss is searched, compared, retrained and
exported like a shipped one. A complete example: ``examples/my_loss.py``; the guide:
``docs/guide/plugins.md``. Importing this module imports nothing heavy; torch is imported when a
decorator is applied (a plug-in imports it anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

__all__ = ["register_backbone", "register_batch_sampler", "register_dataset", "register_loss",
           "register_miner"]


def _plugin_source(fn: Callable[..., Any]) -> str:
    from dmlsearch.trainables.registry import current_plugin

    plugin = current_plugin()
    where = f"{fn.__module__}.{fn.__qualname__}"
    return f"plug-in {plugin} ({fn.__qualname__})" if plugin else where


def _for_plugin() -> Any:
    """The block in which a decorator adds its entry: for the plug-in being imported (its
    origin; dmlsearch's own parts, imported before the block, stay dmlsearch's)."""
    from dmlsearch.trainables.registry import current_plugin
    from dmlsearch.trainables.registry import registering_for

    return registering_for(current_plugin() or "__main__")


def register_loss(name: str, defaults: Mapping[str, float] | None = None, *,
                  param_lr_mult: float = 1.0, needs_m_per_class: bool = False) -> Callable:
    """Register a loss: decorates ``factory(*, num_classes, embedding_size, **params)`` that
    returns a ``torch.nn.Module`` whose ``forward(embeddings, labels)`` returns a scalar tensor.

    ``defaults`` are its hyperparameters (numbers): ``loss.<name>`` settings in spaces and
    ``--set``, passed to the factory as keywords. The module's own parameters (proxies, say)
    train with the model, at the trial's ``lr`` times ``param_lr_mult``.
    ``needs_m_per_class``: the loss needs several examples of each class in a batch (pair and
    triplet losses): a search refuses ``batch_sampler: random`` with it."""
    from dmlsearch.trainables.losses import LossBundle
    from dmlsearch.trainables.losses import register_loss as add

    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"register_loss: expected a name without ':', got {name!r}")

    def decorate(factory: Callable[..., Any]) -> Callable[..., Any]:
        def build(*, num_classes: int, embedding_size: int, **params: float) -> Any:
            criterion = factory(num_classes=num_classes, embedding_size=embedding_size,
                                **params)
            return LossBundle(criterion=criterion, param_lr_mult=param_lr_mult)

        with _for_plugin():
            add(name, defaults={k: float(v) for k, v in (defaults or {}).items()},
                source=_plugin_source(factory), needs_m_per_class=needs_m_per_class)(build)
        return factory

    return decorate


def register_miner(name: str, defaults: Mapping[str, float] | None = None) -> Callable:
    """Register a miner: decorates ``factory(**params)`` returning a module called
    ``miner(embeddings, labels)`` whose result the loss takes as its third argument
    (pytorch-metric-learning's index tuples for PML-based losses). Chosen by ``miner=<name>``,
    its ``defaults`` are ``miner.<name>`` settings."""
    from dmlsearch.trainables.losses import register_miner as add

    def decorate(factory: Callable[..., Any]) -> Callable[..., Any]:
        with _for_plugin():
            add(name, defaults={k: float(v) for k, v in (defaults or {}).items()},
                source=_plugin_source(factory))(factory)
        return factory

    return decorate


def register_backbone(name: str, *, description: str = "", input_kind: str = "image") -> Callable:
    """Register a backbone: decorates ``factory(*, in_channels)`` returning a module that maps
    a float batch ``[B, in_channels, H, W]`` (pixels scaled to [-1, 1]) to a feature map
    ``[B, C, H', W']`` (or ``[B, C]``), or a tuple ``(module, C)``. ``C`` is read from the
    module's ``num_features`` or ``out_channels`` when not given, else from one trial forward
    pass. Pooling, the embedding layer and normalisation are added as for shipped backbones."""
    from dmlsearch.trainables.models import register_backbone as add

    def decorate(factory: Callable[..., Any]) -> Callable[..., Any]:
        def build(*, in_channels: int) -> tuple[Any, int]:
            made = factory(in_channels=in_channels)
            trunk, channels = made if isinstance(made, tuple) else (made, None)
            return trunk, int(channels or _feature_channels(trunk, in_channels))

        with _for_plugin():
            add(name, description=description or _plugin_source(factory),
                input_kind=input_kind)(build)
        return factory

    return decorate


def _feature_channels(trunk: Any, in_channels: int) -> int:
    for attribute in ("num_features", "out_channels"):
        if isinstance(getattr(trunk, attribute, None), int):
            return int(getattr(trunk, attribute))
    import torch

    was = trunk.training
    trunk.eval()
    with torch.no_grad():
        out = trunk(torch.zeros(1, in_channels, 64, 64))
    trunk.train(was)
    return int(out.shape[1])


def register_batch_sampler(name: str) -> Callable:
    """Register a batch sampler: decorates ``batches(labels, batch_size, m, rng)`` that yields
    one epoch's batches as arrays of indices into ``labels`` (``m``: the ``m_per_class``
    setting; ``rng``: a seeded ``numpy.random.Generator``, the only randomness to use)."""
    from dmlsearch.trainables.sampling import BATCH_SAMPLERS
    from dmlsearch.trainables.sampling import SamplerInfo

    def decorate(batches: Callable[..., Any]) -> Callable[..., Any]:
        with _for_plugin():
            BATCH_SAMPLERS.add(name, SamplerInfo(name=name, batches=batches))
        return batches

    return decorate


def register_dataset(name: str, *, description: str, needs_root: bool = False,
                     layout: str = "", image_size: int = 32) -> Callable:
    """Register a dataset: decorates ``builder(*, root, image_size, seed)`` returning a
    :class:`dmlsearch.Dataset` (for images in memory, ``Dataset.with_standard_split(name=...,
    images=dmlsearch.ImageSet(images=uint8 [N, C, H, W], labels=..., class_names=...))``).
    For files listed in a table, the shipped ``dataset=table`` needs no plug-in."""
    from dmlsearch.trainables.data import register_dataset as add

    register = add(name, description=description, needs_root=needs_root,
                   layout=layout or "given by the plug-in", image_size=image_size)

    def decorate(builder: Callable[..., Any]) -> Callable[..., Any]:
        with _for_plugin():
            register(builder)
        return builder

    return decorate
