"""Backbones, their input conventions and pretrained weights (never downloaded)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from torch import nn

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.models import BACKBONES
from dmlsearch.trainables.models import CAFFE_BGR
from dmlsearch.trainables.models import IMAGENET
from dmlsearch.trainables.models import SYMMETRIC
from dmlsearch.trainables.models import BNInception
from dmlsearch.trainables.models import build_model
from dmlsearch.trainables.models import input_transform
from dmlsearch.trainables.models import prepare_input
from dmlsearch.trainables.models._googlenet import _transform_input
from tests.trainables._model_helpers import few_threads  # noqa: F401 (fixture)
from tests.trainables._model_helpers import no_network  # noqa: F401 (fixture)
from tests.trainables._model_helpers import random_images as _images

FEATURES = {"smallcnn": 256, "resnet18": 512, "resnet50": 2048, "googlenet": 1024,
            "bninception": 1024}
IMAGENET_FILES = {
    "resnet18": "resnet18-f37072fd.pth",
    "resnet50": "resnet50-0676ba61.pth",
    "googlenet": "googlenet-1378be20.pth",
    "bninception": "bn_inception-52deb4733.pth",
}
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None) -> Path:
    """An empty torch hub cache: TORCH_HOME → tmp; returns its checkpoints folder."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)  # no torch.hub.set_dir override
    folder = tmp_path / "torch" / "hub" / "checkpoints"
    assert Path(torch.hub.get_dir()) / "checkpoints" == folder
    return folder


# ---- backbones -----------------------------------------------------------------------------
def test_every_registered_image_backbone_is_covered() -> None:
    """Image backbones are covered here, audio ones (tdnn, tdnn_small) in audio/test_tdnn.py."""
    images = [name for name in BACKBONES if BACKBONES.get(name).input_kind == "image"]
    audio = [name for name in BACKBONES if BACKBONES.get(name).input_kind == "audio"]
    assert sorted(images) == sorted(FEATURES)
    assert sorted(audio) == ["tdnn", "tdnn_small"]


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_backbone_embeds_l2_normalised(name: str) -> None:
    channels, size = (1, 32) if name == "smallcnn" else (3, 64)
    model = build_model(backbone=name, in_channels=channels, embedding_size=16, pooling="gap+gmp")
    assert model.embedding.in_features == FEATURES[name]
    images = _images((2, channels, size, size))
    with torch.no_grad():
        fmap = model.trunk(prepare_input(model, images, torch.device("cpu")))
        out = model(prepare_input(model, images, torch.device("cpu")))
    assert fmap.shape[:2] == (2, FEATURES[name])
    assert out.shape == (2, 16)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(2))


def test_grey_images_feed_an_imagenet_backbone() -> None:
    model = build_model(backbone="resnet18", in_channels=1, embedding_size=8, pooling="gap").eval()
    grey = _images((2, 1, 32, 32))
    with torch.no_grad():
        via_transform = model(prepare_input(model, grey, torch.device("cpu")))
        as_rgb = model(prepare_input(model, grey.repeat(1, 3, 1, 1), torch.device("cpu")))
    torch.testing.assert_close(via_transform, as_rgb)


def test_imagenet_backbone_rejects_other_channel_counts() -> None:
    with pytest.raises(UserError, match="1 .*or 3"):
        build_model(backbone="resnet18", in_channels=2, embedding_size=8, pooling="gap")


# ---- BN-Inception: Cadene's layout ---------------------------------------------------------
# (in, out, kernel) of every conv of pretrainedmodels/models/bninception.py, in its order;
# each conv has a bias and is followed by a BatchNorm (weight + bias).
_STEM = [(3, 64, 7), (64, 64, 1), (64, 192, 3)]
_INCEPTION = {  # in, 1x1, 3x3 reduce, 3x3, double reduce, double, pool proj (0: none)
    "3a": (192, 64, 64, 64, 64, 96, 32), "3b": (256, 64, 64, 96, 64, 96, 64),
    "3c": (320, 0, 128, 160, 64, 96, 0), "4a": (576, 224, 64, 96, 96, 128, 128),
    "4b": (576, 192, 96, 128, 96, 128, 128), "4c": (576, 160, 128, 160, 128, 160, 128),
    "4d": (608, 96, 128, 192, 160, 192, 128), "4e": (608, 0, 128, 192, 192, 256, 0),
    "5a": (1056, 352, 192, 320, 160, 224, 128), "5b": (1024, 352, 192, 320, 192, 224, 128),
}


def _reference_convs() -> list[tuple[int, int, int]]:
    convs = list(_STEM)
    for cin, c1, c3r, c3, cdr, cd, proj in _INCEPTION.values():
        convs += [(cin, c1, 1)] if c1 else []
        convs += [(cin, c3r, 1), (c3r, c3, 3), (cin, cdr, 1), (cdr, cd, 3), (cd, cd, 3)]
        convs += [(cin, proj, 1)] if proj else []
    return convs


def test_bninception_parameter_count_matches_the_reference() -> None:
    net = BNInception()
    expected = sum(k * k * cin * cout + cout + 2 * cout for cin, cout, k in _reference_convs())
    count = sum(p.numel() for p in net.parameters())
    assert count == expected == 10_270_240
    # Cadene's model with its 1000-way classifier: 11,295,240 (the published count).
    assert count + 1024 * 1000 + 1000 == 11_295_240
    assert len([m for m in net.modules() if isinstance(m, nn.Conv2d)]) == 69


def test_bninception_layer_names_and_shapes() -> None:
    state = BNInception().state_dict()
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    assert shapes["conv1_7x7_s2.weight"] == (64, 3, 7, 7)
    assert shapes["conv1_7x7_s2.bias"] == (64,)
    assert shapes["conv1_7x7_s2_bn.running_var"] == (64,)
    assert shapes["conv2_3x3.weight"] == (192, 64, 3, 3)
    assert shapes["inception_3a_pool_proj.weight"] == (32, 192, 1, 1)
    assert shapes["inception_3c_double_3x3_2.weight"] == (96, 96, 3, 3)
    assert shapes["inception_4e_3x3.weight"] == (192, 128, 3, 3)
    assert shapes["inception_5b_pool_proj.weight"] == (128, 1024, 1, 1)
    assert shapes["inception_5b_double_3x3_2_bn.weight"] == (224,)
    assert "inception_3c_1x1.weight" not in shapes  # reduction blocks: no 1x1, no pool proj
    assert "inception_4e_pool_proj.weight" not in shapes
    # 69 units × (conv weight, bias; BN weight, bias, mean, var, step counter)
    assert len(state) == 69 * 7


# ---- pretrained weights --------------------------------------------------------------------
def _trunk_equal(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_weights_from_a_path(tmp_path: Path) -> None:
    source = build_model(backbone="resnet18", in_channels=3, embedding_size=8, pooling="gap")
    path = tmp_path / "r18.pth"
    torch.save(source.trunk.state_dict(), path)
    loaded = build_model(backbone="resnet18", in_channels=3, embedding_size=8, pooling="gap",
                         pretrained=str(path))
    assert _trunk_equal(loaded.trunk, source.trunk)


def test_weights_from_a_training_checkpoint_warn_about_the_head(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = build_model(backbone="smallcnn", in_channels=1, embedding_size=8, pooling="gap")
    path = tmp_path / "ckpt.pth"
    torch.save({"state_dict": {f"module.{k}": v for k, v in source.state_dict().items()},
                "epoch": 3}, path)
    with caplog.at_level(logging.WARNING, logger="dmlsearch.trainables.models._weights"):
        loaded = build_model(backbone="smallcnn", in_channels=1, embedding_size=8, pooling="gap",
                             pretrained=str(path))
    assert _trunk_equal(loaded.trunk, source.trunk)
    assert "module.embedding.weight" in caplog.text


def test_weights_that_match_nothing_or_only_part(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.pth"
    torch.save({"encoder.weight": torch.zeros(3)}, foreign)
    with pytest.raises(UserError, match="no key matched"):
        build_model(backbone="smallcnn", in_channels=1, embedding_size=8, pooling="gap",
                    pretrained=str(foreign))
    partial = tmp_path / "partial.pth"
    state = build_model(backbone="smallcnn", in_channels=1, embedding_size=8,
                        pooling="gap").trunk.state_dict()
    torch.save({k: v for k, v in state.items() if not k.startswith("body.0.")}, partial)
    with pytest.raises(UserError, match="missing .*body.0.weight"):
        build_model(backbone="smallcnn", in_channels=1, embedding_size=8, pooling="gap",
                    pretrained=str(partial))
    with pytest.raises(UserError, match="another shape"):  # a 3-channel stem into a 1-channel one
        build_model(backbone="smallcnn", in_channels=1, embedding_size=8, pooling="gap",
                    pretrained=str(_saved_smallcnn(tmp_path, in_channels=3)))


def _saved_smallcnn(tmp_path: Path, *, in_channels: int) -> Path:
    path = tmp_path / f"small{in_channels}.pth"
    trunk = build_model(backbone="smallcnn", in_channels=in_channels, embedding_size=8,
                        pooling="gap").trunk
    torch.save(trunk.state_dict(), path)
    return path


class _Payload:
    """Pickled code: a weights_only load must refuse it."""


def test_unreadable_or_unsafe_files_are_user_errors(tmp_path: Path) -> None:
    (tmp_path / "junk.pth").write_bytes(b"not a torch file")
    torch.save({"weight": torch.zeros(1), "payload": _Payload()}, tmp_path / "unsafe.pth")
    for name in ("junk.pth", "unsafe.pth", "absent.pth"):
        with pytest.raises(UserError, match="pretrained"):
            build_model(backbone="smallcnn", in_channels=1, embedding_size=8, pooling="gap",
                        pretrained=str(tmp_path / name))


@pytest.mark.parametrize("name", sorted(IMAGENET_FILES))
def test_imagenet_weights_absent_name_the_file_and_never_download(name: str, hub: Path) -> None:
    with pytest.raises(UserError) as err:
        build_model(backbone=name, in_channels=3, embedding_size=8, pooling="gap",
                    pretrained="imagenet")
    message = str(err.value)
    assert str(hub / IMAGENET_FILES[name]) in message
    assert f"/{IMAGENET_FILES[name]}" in message and "http" in message  # the URL to fetch
    assert "\n" not in message


def test_smallcnn_has_no_imagenet_weights(hub: Path) -> None:
    with pytest.raises(UserError, match="no ImageNet weights"):
        build_model(backbone="smallcnn", in_channels=1, embedding_size=8, pooling="gap",
                    pretrained="imagenet")


def test_imagenet_weights_load_from_the_cache(hub: Path) -> None:
    """A Cadene-style file: [1, C] BatchNorm tensors, no step counters, a classifier."""
    source = BNInception()
    for m in source.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.weight)
            nn.init.uniform_(m.running_mean)
    state = {k: (v.unsqueeze(0) if "_bn." in k else v) for k, v in source.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    state["last_linear.weight"] = torch.zeros(1000, 1024)
    state["last_linear.bias"] = torch.zeros(1000)
    hub.mkdir(parents=True)
    torch.save(state, hub / IMAGENET_FILES["bninception"])
    model = build_model(backbone="bninception", in_channels=3, embedding_size=8, pooling="gap",
                        pretrained="imagenet")
    got = model.trunk.state_dict()
    for k, v in source.state_dict().items():
        if not k.endswith("num_batches_tracked"):
            assert torch.equal(got[k], v), k


# ---- input conventions ---------------------------------------------------------------------
def _pixel(r: int, g: int, b: int) -> torch.Tensor:
    return torch.tensor([r, g, b], dtype=torch.uint8).view(1, 3, 1, 1)


def test_registry_metadata() -> None:
    assert BACKBONES.get("smallcnn").input == SYMMETRIC
    for name in ("resnet18", "resnet50", "googlenet"):
        assert BACKBONES.get(name).input == IMAGENET
    assert BACKBONES.get("bninception").input == CAFFE_BGR
    for name, file in IMAGENET_FILES.items():
        assert BACKBONES.get(name).imagenet.file_name == file  # type: ignore[union-attr]


def test_smallcnn_input_is_todays_minus_one_to_one() -> None:
    images = _images((2, 1, 4, 4))
    before = images.clone()
    out = input_transform("smallcnn")(images)
    assert out.dtype == torch.float32
    assert torch.equal(out, images.float().div(127.5).sub(1.0))  # bit for bit
    assert torch.equal(images, before)
    ends = input_transform("smallcnn")(torch.tensor([0, 255], dtype=torch.uint8).view(1, 2, 1, 1))
    assert ends.flatten().tolist() == [-1.0, 1.0]


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "googlenet"])
def test_imagenet_input(name: str) -> None:
    out = input_transform(name)(_pixel(10, 20, 30)).flatten()
    hand = torch.tensor([(v / 255 - m) / s for v, m, s in zip((10, 20, 30), MEAN, STD)])
    torch.testing.assert_close(out, hand, rtol=0, atol=1e-6)
    grey = input_transform(name)(torch.full((1, 1, 1, 1), 100, dtype=torch.uint8)).flatten()
    hand = torch.tensor([(100 / 255 - m) / s for m, s in zip(MEAN, STD)])
    torch.testing.assert_close(grey, hand, rtol=0, atol=1e-6)


def test_bninception_input_is_bgr_0_255_minus_caffe_mean() -> None:
    out = input_transform("bninception")(_pixel(10, 20, 30)).flatten()
    assert out.tolist() == [30 - 104, 20 - 117, 10 - 128]
    grey = input_transform("bninception")(torch.full((1, 1, 1, 1), 100, dtype=torch.uint8))
    assert grey.flatten().tolist() == [100 - 104, 100 - 117, 100 - 128]


def test_googlenet_trunk_maps_imagenet_input_to_minus_one_to_one() -> None:
    """torchvision's transform_input: its TF-ported weights see (x/255 - 0.5) / 0.5."""
    images = _images((2, 3, 4, 4))
    inside = _transform_input(input_transform("googlenet")(images))
    torch.testing.assert_close(inside, images.float() / 127.5 - 1, rtol=0, atol=1e-5)


def test_the_written_out_weight_urls_are_torchvisions() -> None:
    """The ImageNet URLs are written out so that registering a backbone does not import
    torchvision (tests/test_structure.py checks that): they must stay torchvision's own."""
    import torchvision.models as tvm

    expected = {"resnet18": tvm.ResNet18_Weights, "resnet50": tvm.ResNet50_Weights,
                "googlenet": tvm.GoogLeNet_Weights}
    for name, weights in expected.items():
        assert BACKBONES.get(name).imagenet.url == weights.IMAGENET1K_V1.url
