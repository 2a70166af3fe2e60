"""``loss=pml:<ClassName>`` and ``miner=pml:<ClassName>``: any pytorch-metric-learning loss or
miner by name, its numeric constructor arguments as ``loss.<arg>`` / ``miner.<arg>`` settings,
a proxy loss's parameters trained at their own lr, one-line refusals, a real fit, a space."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from pytorch_metric_learning import losses
from pytorch_metric_learning import miners

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses import LOSSES
from dmlsearch.trainables.losses import MINERS
from dmlsearch.trainables.losses import LossBundle
from dmlsearch.trainables.losses import build_loss
from dmlsearch.trainables.losses import resolve_loss_params
from dmlsearch.trainables.losses.pml import PML_VERSION
from tests.helpers import embedding_batch
from tests.helpers import small_config


@pytest.fixture(autouse=True)
def _registries_as_they_were() -> Iterator[None]:
    """A family's entries stay in its registry once asked for: these tests leave none behind
    (other tests list LOSSES.names())."""
    saved = {reg: dict(reg._entries) for reg in (LOSSES, MINERS)}
    yield
    for reg, entries in saved.items():
        reg._entries.clear()
        reg._entries.update(entries)


def _bundle(cfg: TrialConfig, *, num_classes: int = 4, embedding_size: int = 8) -> LossBundle:
    return build_loss(cfg.loss, cfg.loss_params, num_classes=num_classes,
                      embedding_size=embedding_size, miner=cfg.miner,
                      miner_params=cfg.miner_params)


def _one_line(err: pytest.ExceptionInfo[UserError]) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


# -- losses by name -------------------------------------------------------------------------------


def test_contrastive_takes_its_margins_as_settings_and_equals_pml() -> None:
    info = LOSSES.get("pml:ContrastiveLoss")
    assert dict(info.defaults) == {"pos_margin": 0.0, "neg_margin": 1.0}
    assert info.source == f"pytorch-metric-learning {PML_VERSION} losses.ContrastiveLoss"
    assert not info.uses_proxies and info.needs_m_per_class
    assert not info.supports_memvir and not info.learned_distance
    cfg = TrialConfig.from_flat({"loss": "pml:ContrastiveLoss", "loss.pos_margin": 0.3})
    assert cfg.loss_params == {"pos_margin": 0.3, "neg_margin": 1.0}
    bundle = _bundle(cfg)
    # PML's integer default (pos_margin=0) does not make a searched 0.3 an int.
    assert bundle.criterion.pos_margin == 0.3 and bundle.miner is None
    assert bundle.parameters() == [] and bundle.lr_for(1e-3) is None
    emb, labels = embedding_batch(dim=8)
    expected = losses.ContrastiveLoss(pos_margin=0.3, neg_margin=1)(emb, labels)
    assert bundle(emb, labels).item() == pytest.approx(expected.item(), rel=1e-6)
    assert expected.item() != pytest.approx(losses.ContrastiveLoss()(emb, labels).item())


def test_a_whole_value_goes_as_an_int_where_pml_s_default_is_one() -> None:
    bundle = build_loss("pml:SoftTripleLoss", resolve_loss_params(
        "pml:SoftTripleLoss", {"centers_per_class": 3}), num_classes=4, embedding_size=8)
    assert bundle.criterion.centers_per_class == 3
    assert isinstance(bundle.criterion.centers_per_class, int)
    assert bundle.criterion.fc.shape == (8, 4 * 3)
    with pytest.raises(UserError, match=r"loss.centers_per_class of pml:SoftTripleLoss counts "
                       r"things: expected a whole number, got 2.5") as err:
        build_loss("pml:SoftTripleLoss", resolve_loss_params(
            "pml:SoftTripleLoss", {"centers_per_class": 2.5}), num_classes=4, embedding_size=8)
    _one_line(err)


def test_a_proxy_loss_gets_the_trial_s_sizes_and_trains_its_proxies_at_lr_x_100() -> None:
    info = LOSSES.get("pml:ProxyAnchorLoss")
    assert info.uses_proxies and not info.needs_m_per_class
    assert dict(info.defaults) == {"margin": 0.1, "alpha": 32.0, "lr_mult": 100.0, "lr": 0.0}
    torch.manual_seed(0)
    bundle = build_loss("pml:ProxyAnchorLoss", resolve_loss_params("pml:ProxyAnchorLoss", {}),
                        num_classes=5, embedding_size=8)
    proxies = bundle.criterion.proxies
    assert proxies.shape == (5, 8) and proxies.requires_grad
    assert any(p is proxies for p in bundle.parameters())
    assert bundle.lr_for(1e-4) == pytest.approx(1e-2)  # as proxy_anchor: lr x loss.lr_mult
    # The same value as PML's own class with the same proxies.
    emb, labels = embedding_batch(classes=5, dim=8)
    direct = losses.ProxyAnchorLoss(num_classes=5, embedding_size=8, margin=0.1, alpha=32)
    direct.load_state_dict(bundle.criterion.state_dict())
    assert bundle(emb, labels).item() == pytest.approx(direct(emb, labels).item(), rel=1e-6)
    # loss.lr_mult and loss.lr mean what they mean for proxy_anchor.
    tuned = build_loss("pml:ProxyAnchorLoss", resolve_loss_params(
        "pml:ProxyAnchorLoss", {"lr_mult": 10, "margin": 0.2}), num_classes=5, embedding_size=8)
    assert tuned.lr_for(1e-4) == pytest.approx(1e-3) and tuned.criterion.margin == 0.2
    fixed = build_loss("pml:ProxyAnchorLoss", resolve_loss_params(
        "pml:ProxyAnchorLoss", {"lr": 5e-3}), num_classes=5, embedding_size=8)
    assert fixed.lr_for(1e-4) == pytest.approx(5e-3)
    with pytest.raises(UserError, match=r"loss\.lr_mult must be a number > 0"):
        build_loss("pml:ProxyAnchorLoss", resolve_loss_params(
            "pml:ProxyAnchorLoss", {"lr_mult": 0}), num_classes=5, embedding_size=8)


@pytest.mark.parametrize("name", ["ProxyNCALoss", "SoftTripleLoss", "NormalizedSoftmaxLoss",
                                  "ArcFaceLoss", "CosFaceLoss", "SubCenterArcFaceLoss"])
def test_every_loss_with_trainable_parameters_is_a_proxy_loss(name: str) -> None:
    info = LOSSES.get(f"pml:{name}")
    assert info.uses_proxies and "lr_mult" in info.defaults
    bundle = build_loss(info.name, resolve_loss_params(info.name, {}), num_classes=6,
                        embedding_size=8)
    assert bundle.parameters() and bundle.lr_for(1e-4) == pytest.approx(1e-2)
    # The class weights are sized by the trial (CosFace and SubCenterArcFace take them via *args;
    # SoftTriple and SubCenterArcFace hold several centres per class).
    (weights,) = bundle.parameters()
    assert 8 in weights.shape and weights.numel() % (6 * 8) == 0


def test_asking_for_an_entry_draws_nothing_from_torch_s_random_stream() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    LOSSES.get("pml:SubCenterArcFaceLoss")  # built once to see its trainable parameters
    MINERS.get("pml:BatchHardMiner")
    assert torch.equal(torch.rand(3), expected)


def test_a_memvir_trial_refuses_a_pml_proxy_loss() -> None:
    with pytest.raises(UserError, match=r"memvir_n > 0 needs a loss with class weights"):
        TrialConfig.from_flat({"loss": "pml:ProxyAnchorLoss", "memvir_n": 2})


# -- miners by name -------------------------------------------------------------------------------


@pytest.mark.parametrize("margin", [0.2, 0.05])
def test_a_pml_miner_with_its_setting_feeds_the_loss(margin: float) -> None:
    cfg = TrialConfig.from_flat({"loss": "pml:TripletMarginLoss",
                                 "miner": "pml:TripletMarginMiner", "miner.margin": margin})
    assert cfg.miner_params == {"margin": margin}
    bundle = _bundle(cfg)
    assert isinstance(bundle.miner, miners.TripletMarginMiner) and bundle.miner.margin == margin
    emb, labels = embedding_batch(dim=8, seed=3)
    mined = miners.TripletMarginMiner(margin=margin)(emb, labels)
    expected = losses.TripletMarginLoss()(emb, labels, mined)
    assert bundle(emb, labels).item() == pytest.approx(expected.item(), rel=1e-6)
    info = MINERS.get("pml:TripletMarginMiner")
    assert dict(info.defaults) == {"margin": 0.2}
    assert info.source == f"pytorch-metric-learning {PML_VERSION} miners.TripletMarginMiner"


def test_a_pml_loss_has_no_miner_of_its_own_and_can_take_a_shipped_loss_s_miner() -> None:
    assert _bundle(TrialConfig.from_flat({"loss": "pml:CircleLoss"})).miner is None
    cfg = TrialConfig.from_flat({"loss": "contrastive", "miner": "pml:MultiSimilarityMiner",
                                 "miner.epsilon": 0.2})
    assert _bundle(cfg).miner.epsilon == 0.2


# -- refusals -------------------------------------------------------------------------------------


def test_a_wrong_loss_name_is_one_line_with_the_close_names() -> None:
    with pytest.raises(UserError) as err:
        TrialConfig.from_flat({"loss": "pml:ProxyAnchor"})
    assert _one_line(err).startswith(
        "unknown pytorch-metric-learning loss 'pml:ProxyAnchor'; expected a class of "
        "pytorch_metric_learning.losses such as ProxyAnchorLoss")
    assert str(err.value).endswith("(fix the name in the space file or --set)")
    with pytest.raises(UserError, match=r"such as ContrastiveLoss") as err:
        LOSSES.get("pml:contrastiveloss")
    with pytest.raises(UserError, match=r"^unknown pytorch-metric-learning miner "
                       r"'pml:TripletMiner'.* such as TripletMarginMiner") as err:
        TrialConfig.from_flat({"miner": "pml:TripletMiner"})
    _one_line(err)
    assert "pml:Nothing" not in LOSSES and "pml:ContrastiveLoss" in LOSSES


@pytest.mark.parametrize(("registry", "name", "says"), [
    (LOSSES, "CrossBatchMemory", (
        r"'pml:CrossBatchMemory' is not a pytorch-metric-learning loss: "
        r"pytorch_metric_learning.losses.CrossBatchMemory is no BaseMetricLossFunction")),
    (LOSSES, "TripletMarginMiner", (
        r"'pml:TripletMarginMiner' is a pytorch-metric-learning miner, not a loss; .* such as "
        r"TripletMarginLoss .*use it as miner=pml:TripletMarginMiner")),
    (MINERS, "TripletMarginLoss", r"is a pytorch-metric-learning loss, not a miner"),
    (LOSSES, "BaseMetricLossFunction", r"an abstract base class"),
    (LOSSES, "GenericPairLoss", r"its constructor needs mat_based_loss, with no default"),
    (LOSSES, "RankedListLoss", r"its constructor needs margin, Tn, with no default"),
    (LOSSES, "VICRegLoss", r"takes no class labels"),
    (LOSSES, "__class__", r"^unknown pytorch-metric-learning loss"),
    (MINERS, "EmbeddingsAlreadyPackagedAsTriplets", r"no batch_sampler of dmlsearch draws"),
])
def test_what_is_not_a_usable_loss_or_miner_is_refused_in_one_line(
        registry: object, name: str, says: str) -> None:
    with pytest.raises(UserError, match=says) as err:
        registry.get(f"pml:{name}")  # type: ignore[attr-defined]
    _one_line(err)


def test_an_unknown_argument_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(UserError, match=r"loss 'pml:ContrastiveLoss' has no parameter "
                       r"loss.margin; its parameters are: loss.pos_margin, loss.neg_margin"):
        TrialConfig.from_flat({"loss": "pml:ContrastiveLoss", "loss.margin": 0.5})
    # The framework's regulariser weight is no loss's own parameter.
    with pytest.raises(UserError, match=r"its parameters are: loss.m, loss.gamma \("):
        TrialConfig.from_flat({"loss": "pml:CircleLoss", "loss.embedding_reg_weight": 1})
    with pytest.raises(UserError, match=r"miner 'pml:TripletMarginMiner' has no parameter "
                       r"miner.type_of_triplets; its parameters are: miner.margin"):
        TrialConfig.from_flat({"miner": "pml:TripletMarginMiner",
                               "miner.type_of_triplets": 1})


def test_a_value_pml_refuses_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"pytorch-metric-learning refused pml:SoftTripleLoss "
                       r"with loss.centers_per_class=-1, .*RuntimeError") as err:
        _bundle(TrialConfig.from_flat({"loss": "pml:SoftTripleLoss",
                                       "loss.centers_per_class": -1}))
    _one_line(err)


# -- a real fit, a space --------------------------------------------------------------------------


def test_a_pml_circle_loss_trains_on_glyphs(split) -> None:  # type: ignore[no-untyped-def]
    from dmlsearch.trainables.fit import Fitter

    train, val = split
    train = train.select_classes(train.classes()[:24])  # a quarter of the classes: seconds
    cfg = small_config(loss="pml:CircleLoss", epochs=2, device="cpu", threads=1,
                       **{"loss.m": 0.25, "loss.gamma": 64})
    result = Fitter(cfg, train, val).run()
    assert len(result.history) == 2 and result.best_value is not None
    assert all(math.isfinite(v) for row in result.history for v in row.values()
               if isinstance(v, float))
    assert 0.0 < result.best_value <= 1.0


def _space(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pml.yaml"
    path.write_text("name: pml\nsource: test (pytorch-metric-learning losses by name)\n" + text)
    return path


def test_a_space_searching_a_pml_loss_s_arguments_is_valid(tmp_path: Path) -> None:
    from dmlsearch.search.options import SearchOptions
    from dmlsearch.search.prepare import prepare
    from dmlsearch.spaces import load_space
    from dmlsearch.spaces import show_text

    path = _space(tmp_path, (
        "base: {dataset: glyphs, epochs: 1}\n"
        "params:\n"
        "  - loss: {type: categorical, choices: [pml:ContrastiveLoss, pml:ProxyAnchorLoss]}\n"
        "  - loss.pos_margin: {type: float, low: 0.0, high: 0.4, when: {loss: "
        "pml:ContrastiveLoss}}\n"
        "  - loss.lr_mult: {type: float, low: 1.0, high: 1000.0, log: true, when: {loss: "
        "pml:ProxyAnchorLoss}}\n"
        "  - miner: {type: categorical, choices: [none, pml:TripletMarginMiner]}\n"
        "  - miner.margin: {type: float, low: 0.05, high: 0.5, when: {miner: "
        "pml:TripletMarginMiner}}\n"
        "warm_start:\n"
        "  - {loss: pml:ContrastiveLoss, loss.pos_margin: 0.0, miner: none}\n"))
    prepared = prepare(SearchOptions(space=str(path)))
    assert prepared.searched == ("loss", "loss.pos_margin", "loss.lr_mult", "miner",
                                 "miner.margin")
    assert prepared.base.loss == "pml:ContrastiveLoss"
    card = show_text(load_space(path))
    assert "pml:ProxyAnchorLoss" in card and "pml:ContrastiveLoss" in card


def test_a_space_naming_an_argument_the_pml_loss_lacks_is_refused(tmp_path: Path) -> None:
    from dmlsearch.search.options import SearchOptions
    from dmlsearch.search.prepare import prepare

    path = _space(tmp_path, (
        "base: {dataset: glyphs, epochs: 1, loss: pml:ContrastiveLoss}\n"
        "params:\n"
        "  loss.margin: {type: float, low: 0.1, high: 0.9}\n"))
    with pytest.raises(UserError, match=r"has no parameter loss.margin; its parameters are: "
                       r"loss.pos_margin, loss.neg_margin"):
        prepare(SearchOptions(space=str(path)))
