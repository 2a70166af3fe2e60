"""The files the bad-input catalogue feeds the command line: broken spaces, image trees in the
wrong layout or with a corrupt image, hand-edited exports, results folders that cannot resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from dmlsearch.trainables.data.cub_like import write_cub_like

HEAD = "name: demo\nsource: dmlsearch tests (bad input)\n"

SPACES = {
    # line 5 holds the unclosed flow mapping of line 4
    "syntax.yaml": HEAD + "params:\n  lr: {type: float, low: 1.0e-4, high: 1.0e-2\n"
                          "  loss: {type: categorical, choices: [triplet]}\n",
    "indent.yaml": HEAD + "params:\n  lr: {type: float, low: 1.0e-4, high: 1.0e-2}\n"
                          " epochs: 3\n",
    "unknown_param.yaml": HEAD + "base:\n  epochs: 2\nparams:\n"
                                 "  learning_rate: {type: float, low: 1.0e-4, high: 1.0e-2}\n",
    "unknown_loss.yaml": HEAD + "params:\n  loss: {type: categorical, "
                                "choices: [multi_similarity, arcfacee]}\n",
    "unknown_backbone.yaml": HEAD + "params:\n  backbone: {type: categorical, "
                                    "choices: [smallcnn, vgg99]}\n",
    "unknown_sampler.yaml": HEAD + "params:\n"
                                   "  batch_sampler: {type: categorical, "
                                   "choices: [m_per_class, pk]}\n",
    "renamed_setting.yaml": HEAD + "params:\n"
                                   "  scheduler: {type: categorical, choices: [step, none]}\n",
    "reversed.yaml": HEAD + "params:\n  lr: {type: float, low: 1.0e-2, high: 1.0e-4}\n",
    "step.yaml": HEAD + "params:\n  batch_size: {type: int, low: 32, high: 64, step: 64}\n",
    "batch_choice.yaml": HEAD + "params:\n"
                                "  batch_size: {type: categorical, choices: [32, 4096]}\n",
}

EXPORTS = {
    "unknown_setting.yaml": "dmlsearch_export: 1\nconfig:\n  epochs: 1\n  learning_rate: 0.1\n",
    "wrong_type.yaml": "dmlsearch_export: 1\nconfig:\n  epochs: three\n",
    "wrong_type_bool.yaml": "dmlsearch_export: 1\nconfig:\n  freeze_bn: perhaps\n",
    "unknown_top.yaml": "dmlsearch_export: 1\nconfig:\n  epochs: 1\nnotes: mine\n",
    "not_yaml.yaml": "dmlsearch_export: 1\nconfig: {epochs: 1\n",
    "not_mapping.yaml": "- epochs\n- 1\n",
    "config_list.yaml": "dmlsearch_export: 1\nconfig: [epochs, 1]\n",
    "format.yaml": "dmlsearch_export: 7\nconfig:\n  epochs: 1\n",
    "good.yaml": "dmlsearch_export: 1\nconfig:\n  epochs: 1\n  embedding_size: 16\n",
}


def _tree(root: Path, *, classes: int, per_class: int, flat: bool = False) -> None:
    rng = np.random.default_rng(0)
    for c in range(classes):
        folder = root if flat else root / f"class{c:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, size=(10, 10, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / (f"c{c}_{i}.png" if flat else f"{i}.png"))


def make_inputs(root: Path) -> Path:
    """Write every bad input under ``root`` (returned)."""
    for folder, files in (("spaces", SPACES), ("exports", EXPORTS)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / folder / name).write_text(text)
    _tree(root / "flat", classes=8, per_class=4, flat=True)
    _tree(root / "one_class", classes=1, per_class=8)
    _tree(root / "corrupt", classes=8, per_class=4)
    (root / "corrupt" / "class03" / "2.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    _tree(root / "empty_image", classes=8, per_class=4)
    (root / "empty_image" / "class05" / "1.png").write_bytes(b"")
    cub = write_cub_like(root / "cub_truncated", classes=4, images=16)
    jpeg = sorted((cub / "images").rglob("*.jpg"))[6]
    jpeg.write_bytes(jpeg.read_bytes()[:3000])  # its header reads fine: PIL opens it
    (root / "a_file").write_text("not a folder\n")
    (root / "nonempty").mkdir()
    (root / "nonempty" / "notes.txt").write_text("keep me\n")
    finished = root / "finished"
    finished.mkdir()
    (finished / "search.yaml").write_text("options: {}\n")
    (finished / "summary.json").write_text("{}\n")
    return root
