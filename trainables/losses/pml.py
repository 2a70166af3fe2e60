"""Any pytorch-metric-learning loss or miner by name: ``loss=pml:<ClassName>``,
``miner=pml:<ClassName>``.

``pml:CircleLoss`` is ``pytorch_metric_learning.losses.CircleLoss``; ``pml:TripletMarginMiner``
is ``pytorch_metric_learning.miners.TripletMarginMiner``. Each name becomes a registry entry the
first time it is asked for (:meth:`~trainables.registry.Registry.add_family`), so a space file,
``--set``, a comparison's ``--methods`` and an export use it like a shipped loss.

What the entry takes, read from the class's constructor (its own arguments and those it passes
on to its bases through ``*args``/``**kwargs``):

- **Numbers** (an ``int`` or ``float`` default, not a ``bool``) are its parameters,
  ``loss.<arg>`` / ``miner.<arg>`` settings with PML's default (``loss.pos_margin`` of
  ``pml:ContrastiveLoss``), searched in space files like any loss parameter. A value is passed
  as an ``int`` where PML's default is one and the value is whole (``CircleLoss(gamma=80)``),
  else as a float: PML writes many real-valued margins and scales with integer defaults
  (``ContrastiveLoss(pos_margin=0)``), so a searched 0.3 must stay 0.3. Arguments that count
  things (:data:`WHOLE`: ``num_bins``, ``centers_per_class``, ...) refuse a fraction.
- ``num_classes`` and ``embedding_size`` (and P2SGradLoss's ``descriptors_dim``) are filled
  from the trial: its training classes and its embedding size.
- Everything else (``distance``, ``reducer``, strings such as ``type_of_triplets``, booleans,
  numbers whose default is ``None``) keeps PML's default. The framework's arguments shared by
  every loss (``embedding_reg_weight``, ``weight_reg_weight``: weights of a regulariser object
  that cannot be given by name) are not offered.
- A class that needs an argument with no default that dmlsearch cannot fill
  (``RankedListLoss``'s ``margin`` and ``Tn``, ``GenericPairLoss``'s ``mat_based_loss``), a
  loss that takes no labels (``VICRegLoss``, ``ManifoldLoss``), a wrapper that is no
  ``BaseMetricLossFunction`` (``CrossBatchMemory``) or no ``BaseMiner``, a miner that needs
  batches no batch sampler draws (``EmbeddingsAlreadyPackagedAsTriplets``) and the abstract base
  classes are refused with one line that says so and how to go on (a plug-in:
  ``docs/plugins.md``).

**The loss's own parameters.** A class that has trainable parameters (proxies or class weights:
``ProxyAnchorLoss``, ``ProxyNCALoss``, ``SoftTripleLoss``, ``NormalizedSoftmaxLoss``,
``ArcFaceLoss``, ``CosFaceLoss``, ...; found by building it once with its defaults) is a proxy
loss (``uses_proxies``) and gets two more settings, those of the shipped ``proxy_anchor`` and
``thesis_proxy`` (same meaning, same defaults, same code:
:func:`~trainables.losses.proxy_anchor.proxies_bundle`): ``loss.lr_mult`` (100: its parameters
learn at ``lr × 100``) and ``loss.lr`` (0; > 0 fixes their rate whatever ``lr`` is). 100 because
that is what the sources give class parameters: the Proxy-Anchor code and the thesis code train
the proxies at ``lr × 100``, SoftTriple's code its centres at 1e-2 against the backbone's 1e-4,
and the shipped norm_softmax, cosface and curricular_face fix theirs at 1e-2, 100 times an lr of
1e-4; class weights at the backbone's small lr barely move in a short search. Searching
``loss.lr_mult`` (log, 1 to 1000) answers the question for a given loss. A loss without trainable
parameters (pair, triplet and MS-style losses) has neither setting and asks for batches with
several examples per class (``needs_m_per_class``). Neither kind is a dmlsearch class-weight loss,
so MemVir (``memvir_n``) refuses them.

PML's criterion is called ``criterion(embeddings, labels)``, or with a miner's index tuple as the
third argument (:class:`~trainables.losses.LossBundle`). A ``pml:`` loss has no miner of its own
(``miner: default`` is none). The few PML losses that take no index tuple (InstanceLoss,
P2SGradLoss, PNPLoss) fail their first step, with PML's reason, when a miner is set.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

import pytorch_metric_learning
import torch
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning import miners as pml_miners
from torch import nn

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses._base import LOSSES
from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import LossInfo
from dmlsearch.trainables.losses._miners import MINERS
from dmlsearch.trainables.losses._miners import MinerInfo
from dmlsearch.trainables.losses.proxy_anchor import proxies_bundle

__all__ = ["PML_VERSION", "PREFIX", "WHOLE", "loss_entry", "miner_entry"]

PREFIX = "pml:"
PML_VERSION = pytorch_metric_learning.__version__
_FIX = "fix the name in the space file or --set"

#: The trial's numbers a constructor may ask for, by the argument's name.
_FILLED = {"num_classes": "num_classes", "embedding_size": "embedding_size",
           "descriptors_dim": "embedding_size"}  # P2SGradLoss calls the embedding size so
#: Arguments that count things: a fraction is refused (where PML's default is an int).
WHOLE = frozenset({"num_bins", "n_bins", "centers_per_class", "sub_centers", "K", "l",
                   "pos_per_bin", "neg_per_bin", "memory_size"})
#: A proxy loss's extra settings, as proxy_anchor's: its parameters at lr x lr_mult, or a fixed lr.
_PROXY_SETTINGS = {"lr_mult": 100.0, "lr": 0.0}
#: Where PML's framework lives (records, reducers, distances, regularisers): its constructors'
#: arguments are no loss's own, and they pass the rest on through **kwargs.
_FRAMEWORK = ("pytorch_metric_learning.utils.", "pytorch_metric_learning.losses.mixins",
              "pytorch_metric_learning.losses.base_metric_loss_function",
              "pytorch_metric_learning.miners.base_miner")
#: Classes that cannot work on dmlsearch's batches, and why.
_UNFIT = {"EmbeddingsAlreadyPackagedAsTriplets": "expects each batch packed as consecutive "
          "(anchor, positive, negative) triplets, which no batch_sampler of dmlsearch draws"}
#: The sizes a class is built with once, to see whether it has trainable parameters.
_PROBE = {"num_classes": 4, "embedding_size": 8}


@dataclasses.dataclass(frozen=True)
class _Kind:
    """Losses or miners: where PML keeps them and what they subclass."""

    word: str  # loss / miner
    module: Any
    base: type
    abstract: str  # the method a usable class overrides


_LOSS = _Kind("loss", pml_losses, pml_losses.BaseMetricLossFunction, "compute_loss")
_MINER = _Kind("miner", pml_miners, pml_miners.BaseMiner, "mine")


@dataclasses.dataclass(frozen=True)
class _Arguments:
    """A constructor read: its numeric arguments, those dmlsearch fills, those nothing fills."""

    numbers: dict[str, float]  # name -> PML's default, as a float
    ints: frozenset[str]  # those whose default is an int
    filled: dict[str, str]  # argument -> the trial's number it gets
    missing: tuple[str, ...]  # required, and nothing fills them


def _arguments(cls: type) -> _Arguments:
    """The arguments ``cls(...)`` accepts: its constructor's, then those of the bases it passes
    ``*args`` / ``**kwargs`` on to (a base's required argument counts only where the positional
    arguments reach it; otherwise the subclass gives it, as GeneralizedLiftedStructureLoss gives
    GenericPairLoss its ``mat_based_loss``)."""
    defaults: dict[str, Any] = {}
    required: list[str] = []
    positional_reach = True
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if not klass.__module__.startswith("pytorch_metric_learning"):
            break  # torch.nn.Module, object
        if klass.__module__.startswith(_FRAMEWORK):
            continue  # records, reducer, distance, regularisers: they pass **kwargs on
        params = list(inspect.signature(init).parameters.values())[1:]
        var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
        var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in defaults \
                    or p.name in required:
                continue
            if p.default is p.empty:
                if positional_reach:
                    required.append(p.name)
            else:
                defaults[p.name] = p.default
        if not (var_pos or var_kw):
            break
        positional_reach = positional_reach and var_pos
    filled = {name: _FILLED[name] for name in [*required, *defaults] if name in _FILLED}
    numbers = {name: float(value) for name, value in defaults.items()
               if name not in filled and isinstance(value, (int, float))
               and not isinstance(value, bool) and math.isfinite(value)}
    ints = frozenset(name for name in numbers if isinstance(defaults[name], int))
    missing = tuple(name for name in required if name not in filled)
    return _Arguments(numbers, ints, filled, missing)


def _usable(kind: _Kind, cls: Any) -> bool:
    """A class of ``kind`` that can be built by name (no probe: for suggestions)."""
    return (inspect.isclass(cls) and issubclass(cls, kind.base) and cls is not kind.base
            and cls.__name__ not in _UNFIT and _implements(kind, cls)
            and not _arguments(cls).missing and _takes_labels(cls))


def _implements(kind: _Kind, cls: type) -> bool:
    return getattr(cls, kind.abstract) is not getattr(kind.base, kind.abstract)


def _takes_labels(cls: type) -> bool:
    """False for a loss whose ``compute_loss`` refuses labels (self-supervised: VICRegLoss)."""
    method = getattr(cls, "compute_loss", None)
    if method is None:
        return True
    try:
        return "labels_not_supported" not in inspect.getsource(method)
    except (OSError, TypeError):
        return True


def _names(kind: _Kind) -> list[str]:
    """The usable classes of ``kind``, by name."""
    return sorted(n for n in dir(kind.module)
                  if not n.startswith("_") and _usable(kind, getattr(kind.module, n)))


def _such_as(kind: _Kind, name: str) -> str:
    """`` such as X or Y`` (the close names), or ``, one of: `` every usable name."""
    names = _names(kind)
    lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(name.lower(), list(lower), n=3, cutoff=0.6)
    if close:
        return " such as " + " or ".join(lower[c] for c in close)
    return ", one of: " + ", ".join(names)


def _class(kind: _Kind, name: str) -> type:
    """The PML class ``name`` of ``kind``, or the one-line refusal."""
    where = f"pytorch_metric_learning.{kind.module.__name__.rsplit('.', 1)[-1]}"
    public = name.isidentifier() and not name.startswith("_")
    found = getattr(kind.module, name, None) if public else None
    if not inspect.isclass(found):
        other = _MINER if kind is _LOSS else _LOSS
        if public and inspect.isclass(getattr(other.module, name, None)):
            raise UserError(
                f"'{PREFIX}{name}' is a pytorch-metric-learning {other.word}, not a "
                f"{kind.word}; expected a class of {where}{_such_as(kind, name)} (use it as "
                f"{other.word}={PREFIX}{name}, or {_FIX})")
        raise UserError(
            f"unknown pytorch-metric-learning {kind.word} '{PREFIX}{name}'; expected a class of "
            f"{where}{_such_as(kind, name)} ({_FIX})")
    if not issubclass(found, kind.base):
        raise UserError(
            f"'{PREFIX}{name}' is not a pytorch-metric-learning {kind.word}: {where}.{name} is no "
            f"{kind.base.__name__} (a wrapper or helper); expected a {kind.word} class"
            f"{_such_as(kind, name)} ({_FIX})")
    if found is kind.base or not _implements(kind, found):
        raise UserError(
            f"'{PREFIX}{name}' is an abstract base class of pytorch-metric-learning, not a "
            f"{kind.word} that trains; expected a {kind.word} class{_such_as(kind, name)} "
            f"({_FIX})")
    if not _takes_labels(found):
        raise UserError(
            f"'{PREFIX}{name}' takes no class labels (a self-supervised {kind.word}: it compares "
            f"embeddings with reference embeddings); expected a {kind.word} trained on labels"
            f"{_such_as(kind, name)} ({_FIX})")
    if name in _UNFIT:
        raise UserError(
            f"'{PREFIX}{name}' {_UNFIT[name]}; expected a {kind.word} class"
            f"{_such_as(kind, name)} ({_FIX})")
    missing = _arguments(found).missing
    if missing:
        raise UserError(
            f"'{PREFIX}{name}' cannot be built by name: its constructor needs "
            f"{', '.join(missing)}, with no default (dmlsearch fills num_classes and "
            f"embedding_size, and a setting can only change a default); expected a "
            f"{kind.word} whose other arguments have defaults, or register your own "
            f"{kind.word} with the value as a plug-in (docs/plugins.md)")
    return found


def _value(kind: _Kind, cls: type, args: _Arguments, key: str, value: float) -> int | float:
    """``value`` as PML takes it: an int where its default is one and the value is whole."""
    value = float(value)
    if key in args.ints and value.is_integer():
        return int(value)
    if key in args.ints and key in WHOLE:
        raise UserError(
            f"{kind.word}.{key} of {PREFIX}{cls.__name__} counts things: expected a whole "
            f"number, got {value:g}; fix {kind.word}.{key} (an int range in the space file)")
    return value


def _construct(kind: _Kind, cls: type, args: _Arguments, params: Mapping[str, float],
               trial: Mapping[str, int]) -> nn.Module:
    """``cls`` with ``params`` (checked names) and the trial's numbers; PML's refusal of a
    value is the user's to fix."""
    kwargs: dict[str, Any] = {arg: int(trial[what]) for arg, what in args.filled.items()}
    kwargs.update({key: _value(kind, cls, args, key, v) for key, v in params.items()})
    try:
        return cls(**kwargs)
    except (ValueError, AssertionError, TypeError, RuntimeError) as e:  # torch: negative sizes
        given = ", ".join(f"{kind.word}.{k}={v:g}" for k, v in params.items()) or "its defaults"
        raise UserError(
            f"pytorch-metric-learning refused {PREFIX}{cls.__name__} with {given} "
            f"({type(e).__name__}: {e}); expected values it accepts: fix the "
            f"{kind.word}.<param> settings") from None


def _source(kind: _Kind, cls: type) -> str:
    module = kind.module.__name__.rsplit(".", 1)[-1]
    return f"pytorch-metric-learning {PML_VERSION} {module}.{cls.__name__}"


def _probe(kind: _Kind, cls: type, args: _Arguments) -> nn.Module:
    """``cls`` built once with PML's defaults (a refusal is the user's error now, not in a
    trial), drawing nothing from torch's random stream: a trial's numbers do not depend on
    whether it is the first in its process to ask for the entry."""
    with torch.random.fork_rng(devices=[]):
        return _construct(kind, cls, args, args.numbers, _PROBE)


def loss_entry(name: str) -> LossInfo:
    """The registry entry of ``pml:<name>`` (the family's builder on :data:`LOSSES`)."""
    cls = _class(_LOSS, name)
    args = _arguments(cls)
    proxies = any(p.requires_grad for p in _probe(_LOSS, cls, args).parameters())
    extra = {k: v for k, v in _PROXY_SETTINGS.items() if k not in args.numbers} if proxies \
        else {}

    def build(*, num_classes: int, embedding_size: int, **params: float) -> LossBundle:
        own = {k: v for k, v in params.items() if k not in extra}
        criterion = _construct(_LOSS, cls, args, own, {"num_classes": num_classes,
                                                      "embedding_size": embedding_size})
        if not proxies:
            return LossBundle(criterion=criterion)
        rates = {**_PROXY_SETTINGS, **{k: v for k, v in params.items() if k in extra}}
        return proxies_bundle(criterion, lr_mult=rates["lr_mult"], lr=rates["lr"])

    return LossInfo(name=PREFIX + name, defaults={**args.numbers, **extra}, build=build,
                    source=_source(_LOSS, cls), uses_proxies=proxies,
                    needs_m_per_class=not proxies)


def miner_entry(name: str) -> MinerInfo:
    """The registry entry of ``pml:<name>`` (the family's builder on :data:`MINERS`)."""
    cls = _class(_MINER, name)
    args = _arguments(cls)
    _probe(_MINER, cls, args)  # PML's defaults build

    def build(**params: float) -> nn.Module:
        return _construct(_MINER, cls, args, params, _PROBE)

    return MinerInfo(name=PREFIX + name, defaults=dict(args.numbers), build=build,
                     source=_source(_MINER, cls))


def _register(registry: Any, build: Callable[[str], Any], word: str) -> None:
    registry.add_family(PREFIX, build, hint=f"{PREFIX}<ClassName> (any pytorch-metric-learning "
                                            f"{word})")


_register(LOSSES, loss_entry, "loss")
_register(MINERS, miner_entry, "miner")
