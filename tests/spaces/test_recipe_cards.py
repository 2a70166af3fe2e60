"""Recipe cards (``dmlsearch spaces show``): every shipped space renders one, wrapped without
cutting words; concrete lines state what a trial does (frozen BatchNorm only with pretrained
weights, the head-only warm-up, the proxies' lr as a multiple of lr, the groups' weight decay,
the input convention, the crops, the branches); a space file's ``differences:`` are read,
validated line by line and printed. No training, no network."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from dmlsearch.search.cli import main
from dmlsearch.spaces import Difference
from dmlsearch.spaces import Space
from dmlsearch.spaces import load_space
from dmlsearch.spaces import preview
from dmlsearch.spaces import recipe_card
from dmlsearch.spaces import show_text
from dmlsearch.spaces import space_names
from dmlsearch.spaces._recipe import recipe_sections
from dmlsearch.spaces._recipe_sections import DATASET_PIXELS
from dmlsearch.spaces._recipe_values import Values
from dmlsearch.trainables.data import dataset_info
from dmlsearch.trainables.data import dataset_names
from dmlsearch.trainables.errors import UserError

TITLES = ["Data & protocol", "Backbone", "BatchNorm", "Warm-up", "Optimiser & groups",
          "Schedule", "Crops", "Sampler", "Loss", "Differences"]

#: A fixed setup most cases below vary: the thesis's ProxyAnchor recipe on CUB.
BASE = {"dataset": "cub200", "backbone": "bninception", "pretrained": "imagenet",
        "embedding_size": 512, "loss": "proxy_anchor", "batch_sampler": "random",
        "batch_size": 180, "optimizer": "adamw", "lr": 1.0e-4, "weight_decay": 1.0e-4,
        "lr_schedule": "step", "lr_step_size": 10, "lr_gamma": 0.1, "epochs": 100}


def write_space(tmp_path: Path, base: dict[str, object] | None = None, *,
                params: str = "seed: {type: categorical, choices: [0, 1]}",
                extra: str = "") -> Path:
    """A space file of ``BASE`` updated by ``base`` (a key given None is left out)."""
    settings = {k: v for k, v in {**BASE, **(base or {})}.items() if v is not None}
    lines = "".join(f"  {k}: {v}\n" for k, v in settings.items())
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nsource: a test\nbase:\n{lines}params:\n"
                    f"{textwrap.indent(params, '  ')}\n{extra}")
    return path


def section(space: Space, title: str) -> str:
    found = [s for s in recipe_sections(space) if s.title == title]
    assert len(found) == 1, (title, [s.title for s in recipe_sections(space)])
    return "\n".join(found[0].lines)


def card_of(tmp_path: Path, base: dict[str, object] | None = None, **kwargs: str) -> Space:
    return load_space(write_space(tmp_path, base, **kwargs))


# -- every shipped space --------------------------------------------------------------------------


@pytest.mark.parametrize("name", space_names())
def test_every_shipped_space_renders_its_card_in_100_columns(name: str) -> None:
    space = load_space(name)
    card = recipe_card(space, width=100)
    lines = card.splitlines()
    assert max(len(line) for line in lines) <= 100, card
    starts = [line[2:].split("  ")[0] for line in lines if line[2:3].strip()]
    assert [t for t in starts if t in TITLES] == [t for t in TITLES if t in starts]
    assert set(TITLES) <= set(starts), starts
    # No word is cut: the card's words are the sections' words, in order.
    words = [w for s in recipe_sections(space) for w in (s.title + " " + " ".join(s.lines))
             .split()]
    assert card.split()[card.split().index("trains):") + 1:] == words
    # and `spaces show` wraps the space's prose too (table rows stay whole)
    for line in show_text(space, width=100).splitlines():
        assert len(line) <= 100 or re.search(r"\S  +\S", line.strip()), line


@pytest.mark.parametrize("name", space_names())
def test_every_shipped_space_previewed_renders_a_card_that_trains_from_scratch(
        name: str) -> None:
    space, _ = preview(load_space(name))
    assert all("trains normally (trunk from scratch: frozen statistics would be random)" in line
               for line in section(space, "BatchNorm").splitlines())
    head = [line for line in section(space, "Warm-up").splitlines() if "head-only" in line]
    assert head and all("trains from epoch 1" in line for line in head), head


def test_narrow_terminal_wraps_without_cutting_words() -> None:
    space = load_space("thesis_benchmark_sop")
    wide, narrow = recipe_card(space, width=100), recipe_card(space, width=64)
    assert max(len(line) for line in narrow.splitlines()) <= 64
    assert wide.split() == narrow.split()


def test_every_image_dataset_says_how_it_prepares_its_pixels() -> None:
    images = [n for n in dataset_names() if dataset_info(n).input_kind == "image"]
    assert sorted(DATASET_PIXELS) == sorted(images)


# -- concrete lines -------------------------------------------------------------------------------


def test_pretrained_trunk_with_frozen_statistics_says_so(tmp_path: Path) -> None:
    text = section(card_of(tmp_path, {"freeze_bn": "stats"}), "BatchNorm")
    assert text.startswith("statistics frozen (freeze_bn stats); BatchNorm in eval mode")
    assert "never updated" in text and "affine weight and bias train" in text


def test_trunk_from_scratch_trains_its_batchnorm_whatever_freeze_bn_says(tmp_path: Path) -> None:
    text = section(card_of(tmp_path, {"pretrained": "none", "freeze_bn": "stats"}), "BatchNorm")
    assert text == ("trains normally (trunk from scratch: frozen statistics would be random); "
                    "freeze_bn stats does nothing here")


def test_old_boolean_freeze_bn_reads_as_a_trial_reads_it(tmp_path: Path) -> None:
    text = section(card_of(tmp_path, {"freeze_bn": "true"}), "BatchNorm")
    assert text.startswith("frozen, affine weight and bias too (freeze_bn all)")


def test_head_warmup_trains_the_head_only_and_does_nothing_from_scratch(tmp_path: Path) -> None:
    text = section(card_of(tmp_path, {"head_warmup_epochs": 1}), "Warm-up")
    assert text.splitlines()[0] == (
        "head only in the first epoch: the embedding layer and the loss's parameters train, "
        "every other parameter is frozen; all train from epoch 2")
    scratch = section(card_of(tmp_path, {"head_warmup_epochs": 5, "pretrained": "none"}),
                      "Warm-up")
    assert "(head_warmup_epochs 5 does nothing here)" in scratch


def test_settings_set_per_branch_are_told_per_branch(tmp_path: Path) -> None:
    params = ("- backbone: {type: categorical, choices: [bninception, resnet50]}\n"
              "- head_warmup_epochs: {type: categorical, choices: [1], "
              "when: {backbone: bninception}}\n"
              "- head_warmup_epochs: {type: categorical, choices: [5], "
              "when: {backbone: resnet50}}\n"
              "- batch_size: {type: categorical, choices: [100], when: {backbone: resnet50}}")
    space = card_of(tmp_path, {"backbone": None, "batch_size": None}, params=params)
    warmup = section(space, "Warm-up").splitlines()
    assert warmup[0].startswith("backbone bninception: head only in the first epoch:")
    assert warmup[1].startswith("backbone resnet50: head only in the first 5 epochs:")
    backbone = section(space, "Backbone")
    assert "backbone bninception: BN-Inception" in backbone
    assert "input BGR 0-255, mean 104/117/128 (B/G/R) subtracted, std 1" in backbone
    assert ("backbone resnet50: ResNet-50" in backbone and "input RGB 0-1, mean "
            "0.485/0.456/0.406, std 0.229/0.224/0.225 (ImageNet's)" in backbone)
    # a branch that leaves the other backbones to the default says so
    assert section(space, "Sampler").splitlines()[1:] == [
        "backbone bninception: batch size 64", "backbone resnet50: batch size 100"]
    values = Values(space, lambda key, fixed: 64)
    assert values.text("batch_size") == "100 for backbone resnet50; 64 otherwise"
    assert values.text("head_warmup_epochs") == ("1 for backbone bninception; 5 for backbone "
                                                 "resnet50")


def test_a_setting_searched_over_a_range_is_named_not_guessed(tmp_path: Path) -> None:
    space = card_of(tmp_path, params="head_warmup_epochs: {type: int, low: 0, high: 5}")
    assert section(space, "Warm-up").splitlines()[0] == (
        "head_warmup_epochs (searched: [0, 5])")


def test_proxies_learn_at_a_multiple_of_lr_and_show_the_number(tmp_path: Path) -> None:
    text = section(card_of(tmp_path, {"lr": 6.0e-4}), "Optimiser & groups")
    assert "groups: trunk at lr 0.0006; embedding layer at lr x 1 = 0.0006" in text
    assert "proxies at lr x 100 = 0.06, with weight decay 0.0001" in text
    searched = card_of(tmp_path, params="loss.lr_mult: {type: categorical, choices: [10, 100]}")
    assert "proxies at lr x loss.lr_mult (searched: {10, 100})" in section(
        searched, "Optimiser & groups")


def test_loss_with_an_absolute_lr_or_none_and_a_loss_without_parameters(tmp_path: Path) -> None:
    text = section(card_of(tmp_path, {"loss": "proxy_nca"}), "Optimiser & groups")
    assert "proxies at 1e-5 (loss.lr), with weight decay 0.0001" in text
    plain = card_of(tmp_path, {"loss": "multi_similarity", "batch_sampler": "m_per_class",
                               "m_per_class": 5})
    assert "the loss has no parameters of its own" in section(plain, "Optimiser & groups")
    assert section(plain, "Sampler") == ("m per class (5 images of each class), batch size 180 "
                                         "(36 classes)")


def test_adam_eps_gradient_clip_and_schedule(tmp_path: Path) -> None:
    space = card_of(tmp_path, {"optimizer": "adam", "adam_eps": 0.01, "grad_clip": 10})
    text = section(space, "Optimiser & groups").splitlines()[0]
    assert text == ("Adam (eps 0.01), weight decay 0.0001 added to the gradient (L2); gradient "
                    "values clipped to ±10")
    assert section(space, "Schedule").splitlines() == [
        "StepLR: lr x 0.1 every 10 epochs (every group alike)", "100 epochs, validated every epoch"]


def test_crops_of_photos_of_the_store_of_the_original_and_of_sets_in_memory(
        tmp_path: Path) -> None:
    text = section(card_of(tmp_path), "Crops")
    assert text.startswith("training: RandomResizedCrop 224 (scale 0.08-1, aspect ratio "
                           "3/4-4/3) + horizontal flip, cut from the full-size photo")
    assert "decoded once into the node's store" in text
    assert text.endswith("evaluation: Resize 256 + CentreCrop 224")
    assert "decoded every epoch (cache off)" in section(card_of(tmp_path, {"cache": "off"}),
                                                        "Crops")
    resized = section(card_of(tmp_path, {"train_crops": "resized"}), "Crops")
    assert "cut from the photo resized to shorter side 256 (train_crops resized" in resized
    assert section(load_space("quickstart"), "Crops").startswith(
        "none: images held in memory at 32 x 32 px")


def test_searched_settings_say_what_is_searched() -> None:
    space = load_space("quickstart")
    assert "groups: trunk at lr (searched: [0.0003, 0.01] log)" in section(
        space, "Optimiser & groups")
    loss = section(space, "Loss").splitlines()
    assert loss[1].startswith("loss proxy_anchor: margin (searched: [0, 1] step 0.1), alpha "
                              "(searched: [2, 100] step 2), lr_mult 100, lr 0 [")


def test_benchmark_schedule_per_backbone_and_memvir_only_where_it_can_be_on() -> None:
    space = load_space("thesis_benchmark_cub200")
    assert "backbone resnet50: StepLR: lr x 0.1 every 5 epochs" in section(space, "Schedule")
    assert "MemVir" not in [s.title for s in recipe_sections(space)]
    memvir = section(load_space("memvir_batch_size"), "MemVir")
    assert memvir.startswith("N (searched: {0, 45}) past steps used as virtual classes")


# -- differences: the space file's field ---------------------------------------------------------


DIFFERENCES = """\
differences:
  - what: ResNet-18, not the code's PreAct-ResNet18
    why: dmlsearch has no PreAct-ResNet18
  - {what: "crops from the store", why: "decoded once"}
"""


def first_line(path: Path, extra: str) -> int:
    """The line number of ``extra``'s first line in the file ``path`` (which ends with it)."""
    return len(path.read_text().splitlines()) - len(extra.splitlines()) + 1


def test_differences_are_read_and_printed(tmp_path: Path) -> None:
    path = write_space(tmp_path, extra=DIFFERENCES)
    space, first = load_space(path), first_line(path, DIFFERENCES)
    assert space.differences == (
        Difference("ResNet-18, not the code's PreAct-ResNet18", "dmlsearch has no "
                   "PreAct-ResNet18", line=first + 1),
        Difference("crops from the store", "decoded once", line=first + 3))
    assert section(space, "Differences").splitlines() == [
        "- ResNet-18, not the code's PreAct-ResNet18. Why: dmlsearch has no PreAct-ResNet18",
        "- crops from the store. Why: decoded once"]
    # kept by every derived space
    assert space.with_overrides({"epochs": 3}).differences == space.differences
    assert preview(space)[0].differences == space.differences
    assert section(card_of(tmp_path), "Differences") == "none recorded"


@pytest.mark.parametrize(("extra", "offset", "fragments"), [
    ("differences: some text\n", 0, ["expected a list of {what: ..., why: ...}", "got str",
                                      "write '- {what: ..., why: ...}'"]),
    ("differences:\n  - just text\n", 1, ["differences item 1", "expected a mapping"]),
    ("differences:\n  - {what: a, why: b, who: c}\n", 1,
     ["unknown field 'who'", "expected one of what, why", "remove it"]),
    ("differences:\n  - {what: a, why: b}\n  - {what: c}\n", 2,
     ["differences item 2: missing 'why'", "add why: ..."]),
    ("differences:\n  - {what: '', why: b}\n", 1,
     ["differences item 1: what: expected non-empty text", "quoted string"]),
    ("differences:\n  - {what: a, why: 3}\n", 1, ["why: expected non-empty text", "int 3"]),
])
def test_differences_errors_name_file_line_expected_and_fix(
        tmp_path: Path, extra: str, offset: int, fragments: list[str]) -> None:
    """``offset``: the line of the error within ``extra`` (0: its first)."""
    path = write_space(tmp_path, extra=extra)
    with pytest.raises(UserError) as info:
        load_space(path)
    message = str(info.value)
    line = first_line(path, extra) + offset
    assert f"s.yaml:{line}:" in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_empty_differences_is_none_recorded(tmp_path: Path) -> None:
    assert card_of(tmp_path, extra="differences:\n").differences == ()


# -- the command ----------------------------------------------------------------------------------


def test_spaces_show_prints_the_table_then_the_card(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The command wraps to the terminal (60-100 columns): a worker of `pytest -n 2` has one of
    # 80, where the space's path goes to a line of its own. This test reads the 100-column form.
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["spaces", "show", "thesis_search_proxy_anchor"]) == 0
    out = capsys.readouterr().out
    table, card = out.split("recipe card (what a trial of this space trains):")
    assert table.startswith("space thesis_search_proxy_anchor (") and "base settings:" in table
    assert "  Optimiser & groups  " in card and "proxies at lr x 100 = 0.01" in card
    assert max(len(line) for line in card.splitlines()) <= 100
