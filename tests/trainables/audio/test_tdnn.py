"""The ``tdnn`` backbone is the source's Table 3 / reference TDNN (five 1-D convolutions with
their kernels and paddings, statistics pooling, a 512-d segment layer), ``tdnn_small`` the same
at a quarter of the width; whole utterances of different lengths in one batch get the embedding
each gets alone (the slow reference: one utterance at a time); a backbone that takes the other
input kind is a user error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.models import BACKBONES
from dmlsearch.trainables.models import Utterances
from dmlsearch.trainables.models import _tdnn
from dmlsearch.trainables.models import build_model
from dmlsearch.trainables.models import prepare_input
from dmlsearch.trainables.models._tdnn import StatisticsPooling
from dmlsearch.trainables.trial import preflight


def test_tdnn_is_table_3() -> None:
    model = build_model(backbone="tdnn", in_channels=30, embedding_size=256, pooling="gap")
    convs = [m for m in model.trunk.frames if isinstance(m, nn.Conv1d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size[0], c.padding[0], c.dilation[0])
            for c in convs] == [(30, 512, 5, 2, 1), (512, 512, 5, 2, 1), (512, 512, 5, 3, 1),
                                (512, 512, 7, 0, 1), (512, 1500, 1, 0, 1)]
    assert sum(isinstance(m, nn.BatchNorm1d) for m in model.trunk.frames) == 5
    segment = model.trunk.segment[0]
    assert (segment.in_channels, segment.out_channels) == (3000, 512)
    assert (model.embedding.in_features, model.embedding.out_features) == (512, 256)
    # conv weights and biases, BN affine, the segment layer: 6.85 M before the embedding head
    trunk = sum(p.numel() for p in model.trunk.parameters())
    expected = sum(c.weight.numel() + c.bias.numel() for c in convs) \
        + 2 * (4 * 512 + 1500) + 3000 * 512 + 512 + 2 * 512
    assert trunk == expected == 6_849_428
    x = torch.randn(3, 30, 200)
    model.eval()
    out = model(x)
    assert out.shape == (3, 256)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(3))
    assert model.trunk.frames(x).shape[2] == 200 - 4  # k7 p0 takes 6 frames, k5 p3 gives 2


def test_tdnn_small_keeps_the_layout_at_a_quarter_of_the_width() -> None:
    model = build_model(backbone="tdnn_small", in_channels=24, embedding_size=32, pooling="gap")
    convs = [m for m in model.trunk.frames if isinstance(m, nn.Conv1d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size[0]) for c in convs] == [
        (24, 128, 5), (128, 128, 5), (128, 128, 5), (128, 128, 7), (128, 384, 1)]
    assert sum(p.numel() for p in model.parameters()) < 0.6e6
    model.eval()
    for frames in (10, 137, 400):  # any length
        assert model(torch.randn(2, 24, frames)).shape == (2, 32)
    with pytest.raises(UserError, match="needs more than 5 frames"):
        model(torch.randn(2, 24, 5))


def test_statistics_pooling_is_the_mean_and_standard_deviation_over_time() -> None:
    x = torch.randn(4, 7, 50)
    pooled = StatisticsPooling()(x)
    assert pooled.shape == (4, 14, 1)
    torch.testing.assert_close(pooled[:, :7, 0], x.mean(dim=2))
    torch.testing.assert_close(pooled[:, 7:, 0], x.std(dim=2), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("backbone", ["tdnn_small", "tdnn"])
def test_whole_utterances_in_one_batch_embed_as_each_alone(
        backbone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = build_model(backbone=backbone, in_channels=20, embedding_size=24, pooling="gap")
    for m in model.modules():  # batch norm's running statistics away from 0 and 1
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    model.eval()
    lengths = [100, 263, 7, 100, 181, 400, 12]  # shorter, longer, equal, just long enough
    items = [torch.randn(20, n) for n in lengths]
    with torch.no_grad():
        alone = torch.cat([model(item[None]) for item in items])
        # several padded passes (a budget of 800 frames: passes of 2, 4 and 1 utterances)
        monkeypatch.setitem(_tdnn.FRAME_BUDGET, "cpu", 800)
        packed = Utterances.pack(items)
        together = model(prepare_input(model, packed, torch.device("cpu")))
    assert together.shape == (len(items), 24)
    torch.testing.assert_close(together, alone, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(packed.padded([2, 5])[0, :, :7], items[2])
    assert torch.count_nonzero(packed.padded([2, 5])[0, :, 7:]) == 0
    with pytest.raises(UserError, match="needs more than 5 frames per utterance, got 5"):
        model(Utterances.pack([torch.randn(20, 5), torch.randn(20, 50)]))
    model.train()  # batch statistics would average the padding in
    with pytest.raises(RuntimeError, match="eval mode only"):
        model(packed)


def test_masked_statistics_pooling_leaves_the_padding_out() -> None:
    x = torch.randn(3, 5, 40)
    lengths = torch.tensor([40, 17, 2])
    pooled = StatisticsPooling.masked(x, lengths)
    for row, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(pooled[row], StatisticsPooling()(x[row:row + 1, :, :n])[0])


def test_a_backbone_of_the_other_input_kind_is_a_user_error(tmp_path) -> None:  # noqa: ANN001
    from tests.trainables.audio import _trees

    _trees.speaker_tree(tmp_path, speakers=8, per_speaker=2)
    audio = load_dataset("speaker_folder", root=str(tmp_path))
    cfg = TrialConfig.from_flat({"dataset": "speaker_folder", "data_root": str(tmp_path),
                                 "batch_size": 4, "m_per_class": 2, "val_ratio": 0.5})
    with pytest.raises(UserError, match=r"backbone smallcnn takes image input, but dataset "
                       r"speaker_folder is audio; use backbone=tdnn or tdnn_small"):
        preflight(cfg, audio)
    with pytest.raises(UserError, match="channels_last is a memory format of images"):
        preflight(cfg.replace(backbone="tdnn_small", channels_last=True), audio)
    preflight(cfg.replace(backbone="tdnn_small"), audio)
    glyphs = load_dataset("glyphs")
    with pytest.raises(UserError, match=r"backbone tdnn takes audio input, but dataset glyphs "
                       r"is image; use backbone="):
        preflight(TrialConfig.from_flat({"backbone": "tdnn"}), glyphs)
    assert {n for n in BACKBONES.names() if BACKBONES.get(n).input_kind == "audio"} == {
        "tdnn", "tdnn_small"}
