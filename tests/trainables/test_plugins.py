"""A user's plug-ins (trainables/plugins.py, the decorators of dmlsearch._plugin_api): what they
register is looked up like a shipped part, what goes wrong is one line naming the plug-in, and a
trial loads them from the text its search carried."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import dmlsearch
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses import LOSSES
from dmlsearch.trainables.losses import MINERS
from dmlsearch.trainables.losses import build_loss
from dmlsearch.trainables.models import BACKBONES
from dmlsearch.trainables.plugins import carried
from dmlsearch.trainables.plugins import load_plugins
from dmlsearch.trainables.plugins import loaded_plugins
from dmlsearch.trainables.plugins import plugin_specs
from dmlsearch.trainables.plugins import provide
from dmlsearch.trainables.plugins import unload_plugins
from dmlsearch.trainables.sampling import BATCH_SAMPLERS
from tests.helpers import REPO
from tests.helpers import SMALL
from tests.helpers import embedding_batch

EXAMPLE = REPO / "examples" / "my_loss.py"

LOSS = '''
import torch
import dmlsearch

class Scaled(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
    def forward(self, embeddings, labels):
        same = (labels[:, None] == labels[None, :]).float()
        sims = embeddings @ embeddings.T
        return self.scale * ((1 - sims) * same + sims.clamp_min(0) * (1 - same)).mean()

@dmlsearch.register_loss("{name}", defaults={{"scale": 2.0}})
def build(*, num_classes, embedding_size, scale):
    return Scaled(scale)
'''


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    """Each test loads its own plug-ins; none is left in the process's registries."""
    unload_plugins()
    yield
    unload_plugins()


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_the_example_loss_is_searched_like_a_shipped_one() -> None:
    cfg = TrialConfig.from_flat({"plugins": [str(EXAMPLE)], "loss": "margin_proxy",
                                 "loss.margin": 0.3})
    assert cfg.loss_params == {"margin": 0.3, "scale": 16.0}
    assert cfg.to_flat()["plugins"] == [str(EXAMPLE)]
    assert LOSSES.origin("margin_proxy") == "my_loss.py"
    bundle = build_loss(cfg.loss, cfg.loss_params, num_classes=5, embedding_size=8)
    x, y = embedding_batch(classes=4, per_class=2)
    value = bundle(x, y)
    assert value.ndim == 0 and math.isfinite(value.item())
    # the proxies train, at lr x 100 as the example asks
    assert [tuple(p.shape) for p in bundle.parameters()] == [(5, 8)]
    assert bundle.lr_for(1e-3) == pytest.approx(0.1)
    # its value is the example's formula, computed here by hand
    proxies = torch.nn.functional.normalize(bundle.criterion.proxies, dim=1)
    logits = 16.0 * (x @ proxies.T - 0.3 * torch.nn.functional.one_hot(y, 5))
    expected = -torch.log_softmax(logits, dim=1)[torch.arange(len(y)), y].mean()
    assert value.item() == pytest.approx(expected.item(), rel=1e-6)
    with pytest.raises(UserError, match=r"no parameter loss.alpha; its parameters are: "
                                        r"loss.margin, loss.scale"):
        TrialConfig.from_flat({"plugins": [str(EXAMPLE)], "loss": "margin_proxy",
                               "loss.alpha": 3})


def test_a_plugin_trial_trains_end_to_end(tmp_path: Path) -> None:
    from dmlsearch.trainables.trial import run_trial

    plugin = _write(tmp_path, "scaled.py", LOSS.format(name="scaled_pairs"))
    cfg = TrialConfig.from_flat({**SMALL, "epochs": 1, "plugins": [str(plugin)],
                                 "loss": "scaled_pairs"})
    result = run_trial(cfg)
    assert math.isfinite(result.score) and result.epochs_run == 1


@pytest.mark.parametrize("text, expected", [
    ("import torch\nimport not_a_module_xyz\n",
     r"^plug-in bad\.py failed to import: ModuleNotFoundError: No module named "
     r"'not_a_module_xyz' \(bad\.py:2\); fix the plug-in"),
    ("def broken(:\n", r"^plug-in bad\.py failed to import: SyntaxError: .*\(bad\.py:1\)"),
    ("raise RuntimeError('no GPU here')\n",
     r"^plug-in bad\.py failed to import: RuntimeError: no GPU here \(bad\.py:1\)"),
    ("import dmlsearch\n@dmlsearch.register_loss('proxy_anchor')\ndef f(**kw):\n    pass\n",
     r"^plug-in bad\.py registers loss 'proxy_anchor', a name dmlsearch already uses; rename "
     r"it in bad\.py"),
    ("import dmlsearch\n@dmlsearch.register_backbone('resnet50')\ndef f(**kw):\n    pass\n",
     r"^plug-in bad\.py registers backbone 'resnet50', a name dmlsearch already uses"),
    ("import dmlsearch\n@dmlsearch.register_loss('pml:Mine')\ndef f(**kw):\n    pass\n",
     r"register_loss: expected a name without ':'"),
])
def test_a_bad_plugin_is_one_line_naming_it(tmp_path: Path, text: str, expected: str) -> None:
    bad = _write(tmp_path, "bad.py", text)
    with pytest.raises(UserError, match=expected) as caught:
        load_plugins(plugin_specs([bad]))
    assert "\n" not in str(caught.value)
    assert str(bad) not in loaded_plugins()


def test_two_plugins_with_one_name_clash_naming_both(tmp_path: Path) -> None:
    first = _write(tmp_path, "first.py", LOSS.format(name="twice"))
    second = _write(tmp_path, "second.py", LOSS.format(name="twice"))
    load_plugins(plugin_specs([first]))
    with pytest.raises(UserError, match="^plug-in second.py registers loss 'twice', a name "
                                        "plug-in first.py already uses"):
        load_plugins(plugin_specs([second]))


def test_paths_and_modules_are_checked_before_anything_loads(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"--plugin: plug-in file missing.py does not exist "
                                        r"\(looked for .*missing.py\); expected a .py file"):
        plugin_specs(["missing.py"], relative_to=tmp_path)
    _write(tmp_path, "notes.txt", "")
    with pytest.raises(UserError, match="is not a .py file"):
        plugin_specs([tmp_path / "notes.txt"])
    with pytest.raises(UserError, match="neither a .py file nor a module name"):
        plugin_specs(["my loss"])
    with pytest.raises(UserError, match="^plug-in module no_such_pkg_xyz.losses is not "
                                        "importable here"):
        load_plugins(plugin_specs(["no_such_pkg_xyz.losses"]))
    relative = _write(tmp_path, "rel.py", "")
    assert plugin_specs(["rel.py", str(relative)], relative_to=tmp_path) == (str(relative),)


def test_an_edited_plugin_replaces_what_it_registered(tmp_path: Path) -> None:
    path = _write(tmp_path, "edit.py", LOSS.format(name="first_name"))
    load_plugins(plugin_specs([path]))
    load_plugins(plugin_specs([path]))  # unchanged: loaded once
    assert "first_name" in LOSSES
    path.write_text(LOSS.format(name="second_name"))
    load_plugins(plugin_specs([path]))
    assert "second_name" in LOSSES and "first_name" not in LOSSES


def test_a_trial_loads_the_text_its_search_carried(tmp_path: Path) -> None:
    """On another node the file may not exist (or differ): the search's copy is what runs."""
    path = _write(tmp_path, "carried.py", LOSS.format(name="carried_loss"))
    texts = carried(plugin_specs([path]))
    assert texts == {str(path): path.read_text()}
    path.unlink()  # as on a node without the file
    provide(texts)
    cfg = TrialConfig.from_flat({"plugins": [str(path)], "loss": "carried_loss"})
    assert cfg.loss_params == {"scale": 2.0}


def test_every_kind_of_part_registers(tmp_path: Path) -> None:
    plugin = _write(tmp_path, "parts.py", '''
import numpy as np
import torch
import dmlsearch

@dmlsearch.register_backbone("tiny_mlp", description="a flat MLP")
def tiny_mlp(*, in_channels):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(12))

@dmlsearch.register_miner("all_pairs")
def all_pairs():
    class Miner(torch.nn.Module):
        def forward(self, embeddings, labels):
            return None
    return Miner()

@dmlsearch.register_batch_sampler("in_order")
def in_order(labels, batch_size, m, rng):
    for start in range(0, len(labels) - batch_size + 1, batch_size):
        yield np.arange(start, start + batch_size)

@dmlsearch.register_dataset("two_blobs", description="two classes of noise")
def two_blobs(*, root, image_size, seed):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 255, (40, 1, image_size, image_size), dtype=np.uint8)
    labels = np.repeat(np.arange(4), 10)
    return dmlsearch.Dataset.with_standard_split(name="two_blobs", images=dmlsearch.ImageSet(
        images=torch.from_numpy(images), labels=labels, class_names=("a", "b", "c", "d")))
''')
    load_plugins(plugin_specs([plugin]))
    trunk, channels = BACKBONES.get("tiny_mlp").build(in_channels=1)
    assert channels == 12  # from one forward pass: the module says nothing itself
    batches = list(BATCH_SAMPLERS.get("in_order").batches(np.zeros(8), 4, 1, None))
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    from dmlsearch.trainables.data import load_dataset

    dataset = load_dataset("two_blobs", image_size=8)
    assert len(dataset.images.labels) == 40
    cfg = TrialConfig.from_flat({"plugins": [str(plugin)], "loss": "contrastive",
                                 "miner": "all_pairs"})
    assert cfg.miner == "all_pairs" and cfg.miner_params == {}


def test_a_loss_that_returns_no_scalar_is_refused_before_any_trial(tmp_path: Path) -> None:
    from dmlsearch.trainables.plugin_checks import check_plugin_loss

    plugin = _write(tmp_path, "vector.py", '''
import torch
import dmlsearch

class PerItem(torch.nn.Module):
    def forward(self, embeddings, labels):
        return embeddings.sum(dim=1)

class Detached(torch.nn.Module):
    def forward(self, embeddings, labels):
        return torch.tensor(float(embeddings.sum().item()))

@dmlsearch.register_loss("per_item")
def per_item(*, num_classes, embedding_size):
    return PerItem()

@dmlsearch.register_loss("detached")
def detached(*, num_classes, embedding_size):
    return Detached()
''')
    flat = {"plugins": [str(plugin)], "embedding_size": 8}
    with pytest.raises(UserError, match=r"^plug-in vector.py: loss 'per_item' returned a tensor "
                                        r"of shape \[8\] for a batch of 8 embeddings; expected "
                                        r"a scalar"):
        check_plugin_loss(TrialConfig.from_flat({**flat, "loss": "per_item"}), num_classes=10)
    with pytest.raises(UserError, match="returned a value without a gradient"):
        check_plugin_loss(TrialConfig.from_flat({**flat, "loss": "detached"}), num_classes=10)
    check_plugin_loss(TrialConfig.from_flat({"loss": "proxy_anchor"}), num_classes=10)  # shipped


def test_importing_the_package_face_imports_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, dmlsearch; dmlsearch.register_loss; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
    assert dmlsearch.ImageSet.__name__ == "ImageSet"  # on use, from trainables.data


def test_shipped_parts_imported_by_a_plugin_stay_dmlsearchs(tmp_path: Path) -> None:
    """A plug-in loaded first in a process imports dmlsearch's registries: their entries are
    not its own (forgetting the plug-in keeps them; a clash names dmlsearch)."""
    import subprocess
    import sys

    plugin = _write(tmp_path, "first.py", LOSS.format(name="first_loss"))
    code = (
        "from dmlsearch.trainables.plugins import load_plugins, unload_plugins\n"
        f"load_plugins([{str(plugin)!r}])\n"
        "from dmlsearch.trainables.losses import LOSSES\n"
        "print(LOSSES.origin('multi_similarity'), LOSSES.origin('first_loss'))\n"
        "unload_plugins()\n"
        "print('multi_similarity' in LOSSES, 'first_loss' in LOSSES)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["None", "first.py", "True", "False"]


def test_the_example_parts_train_together() -> None:
    """examples/more_parts.py: its backbone, miner, batch sampler and dataset in one trial."""
    from dmlsearch.trainables.trial import run_trial

    cfg = TrialConfig.from_flat({
        "plugins": [str(REPO / "examples" / "more_parts.py")], "dataset": "noisy_bars",
        "backbone": "tiny_convnet", "loss": "contrastive", "miner": "hardest_pairs",
        "miner.keep": 0.25, "batch_sampler": "two_per_class", "m_per_class": 2,
        "batch_size": 8, "embedding_size": 16, "epochs": 2, "threads": 1})
    assert cfg.miner_params == {"keep": 0.25}
    miner = MINERS.get("hardest_pairs").build(keep=0.25)
    x, y = embedding_batch(classes=4, per_class=2)
    a1, p, a2, n = miner(x, y)
    assert len(a1) == 1 and len(a2) == 6 and bool((y[a1] == y[p]).all())  # 4 and 24 pairs
    assert bool((y[a2] != y[n]).all())
    result = run_trial(cfg)
    assert math.isfinite(result.score) and result.epochs_run == 2
