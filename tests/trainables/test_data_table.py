"""The ``table`` dataset (:mod:`trainables.data._table`): images listed in a CSV or Parquet table
(columns ``path``, ``label``, optional ``split``), as open-metric-learning's dataframes list them;
the same images as ``folder`` reads, the decoded store, every input error as one line, a real
Omniglot sample, and a real search through the command line."""

from __future__ import annotations

import csv
import json
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dmlsearch.trainables.data import FileImageSet
from dmlsearch.trainables.data import ImageSet
from dmlsearch.trainables.data import _folder
from dmlsearch.trainables.data import attach_store
from dmlsearch.trainables.data import iterate_batches
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.data import sequential_batches
from dmlsearch.trainables.data import standard_split
from tests.helpers import OMNIGLOT
from tests.helpers import run_cli
from tests.trainables._data_helpers import user_error

COLOURS = [(250, 10, 10), (10, 250, 10), (10, 10, 250), (250, 250, 10), (10, 250, 250),
           (250, 10, 250)]


def _png(path: Path, colour: tuple[int, int, int], size: tuple[int, int] = (14, 10)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)


def _csv(path: Path, rows: list[dict[str, object]], columns: tuple[str, ...] | None = None
         ) -> Path:
    columns = columns or tuple(rows[0])
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _images(top: Path, labels: list[str], per_class: int = 2, split: dict[str, str] | None = None
            ) -> list[dict[str, object]]:
    """``per_class`` PNGs of each label (label k is colour k) under ``top/img``; their rows."""
    rows = []
    for k, label in enumerate(labels):
        for i in range(per_class):
            rel = f"img/c{k}_{i}.png"
            _png(top / rel, COLOURS[k % len(COLOURS)])
            row: dict[str, object] = {"path": rel, "label": label}
            if split is not None:
                row["split"] = split[label]
            rows.append(row)
    return rows


def _mean_colour(dataset, index: int) -> tuple[int, ...]:
    pixels = dataset.images.images[index].float().mean(dim=(1, 2))
    return tuple(round(v) for v in pixels.tolist())


# ---- reading ------------------------------------------------------------------------------
def test_a_csv_with_a_split_column(tmp_path: Path) -> None:
    split = {"cat": "train", "dog": "train", "eel": "test", "fox": "validation"}
    rows = _images(tmp_path, list(split), split=split)
    rows[0]["path"] = str(tmp_path / rows[0]["path"])  # absolute paths are fine too
    rows[-1]["split"] = "Validation "  # any case, whitespace stripped
    table = _csv(tmp_path / "items.csv", rows)
    dataset = load_dataset("table", root=str(table), image_size=8)
    assert dataset.name == "table" and isinstance(dataset.images, ImageSet)
    assert dataset.images.class_names == ("cat", "dog", "eel", "fox")
    assert dataset.train_classes.tolist() == [0, 1]
    assert dataset.test_classes.tolist() == [2, 3]  # validation counts as test
    assert dataset.val_classes.size == 0  # validation classes come out of train (protocols)
    assert dataset.images.labels.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]  # the table's order
    for i, label in enumerate(dataset.images.labels):
        assert _mean_colour(dataset, i) == COLOURS[label]


def test_without_a_split_column_the_standard_split_of_the_sorted_labels(tmp_path: Path) -> None:
    labels = ["10", "2", "33", "1", "7"]  # integers sort as numbers: 1, 2, 7, 10, 33
    table = _csv(tmp_path / "items.csv", _images(tmp_path, labels))
    dataset = load_dataset("table", root=str(table), image_size=8)
    assert dataset.images.class_names == ("1", "2", "7", "10", "33")
    train, test = standard_split(5)  # as folder: the first half trains, the rest test
    assert dataset.train_classes.tolist() == train.tolist() == [0, 1]
    assert dataset.test_classes.tolist() == test.tolist() == [2, 3, 4]
    by_name = {name: k for k, name in enumerate(dataset.images.class_names)}
    assert dataset.images.labels[::2].tolist() == [by_name[label] for label in labels]
    text = _csv(tmp_path / "mixed.csv", _images(tmp_path, ["b", "10", "a", "2"]))
    assert load_dataset("table", root=str(text), image_size=8).images.class_names == (
        "10", "2", "a", "b")  # not all integers: sorted as text


def test_a_parquet_table_reads_as_its_csv(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = _images(tmp_path, ["3", "1", "2", "11"], split={"3": "train", "1": "train",
                                                           "2": "test", "11": "test"})
    as_csv = load_dataset("table", root=str(_csv(tmp_path / "t.csv", rows)), image_size=8)
    columns = {name: [row[name] for row in rows] for name in rows[0]}
    columns["label"] = [int(label) for label in columns["label"]]  # an integer column
    pq.write_table(pa.table(columns), tmp_path / "t.parquet")
    as_parquet = load_dataset("table", root=str(tmp_path / "t.parquet"), image_size=8)
    assert as_parquet.images.class_names == as_csv.images.class_names == ("1", "2", "3", "11")
    assert np.array_equal(as_parquet.images.labels, as_csv.images.labels)
    assert as_parquet.train_classes.tolist() == as_csv.train_classes.tolist() == [0, 2]
    assert torch.equal(as_parquet.images.images, as_csv.images.images)


def test_a_table_of_a_folder_tree_is_that_folder(tmp_path: Path) -> None:
    top = tmp_path / "tree"
    rows = []
    for k, name in enumerate(["ant", "bee", "cow", "doe", "elk"]):
        for i in range(2):
            _png(top / name / f"{i}.png", COLOURS[k], size=(9 + 5 * i, 13))
            rows.append({"path": f"{name}/{i}.png", "label": name})
    folder = load_dataset("folder", root=str(top), image_size=8)
    table = load_dataset("table", root=str(_csv(top / "items.csv", rows)), image_size=8)
    assert table.images.class_names == folder.images.class_names
    assert np.array_equal(table.images.labels, folder.images.labels)
    assert torch.equal(table.images.images, folder.images.images)
    assert table.train_classes.tolist() == folder.train_classes.tolist()
    assert table.test_classes.tolist() == folder.test_classes.tolist()


def test_above_the_memory_budget_files_are_read_per_batch_and_the_store_serves_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))
    table = _csv(tmp_path / "items.csv", _images(tmp_path, ["a", "b", "c", "d"], per_class=3))
    in_memory = load_dataset("table", root=str(table), image_size=8)
    monkeypatch.setattr(_folder, "MEMORY_BUDGET", 0)  # the budget folder uses
    lazy = load_dataset("table", root=str(table), image_size=8)
    assert isinstance(lazy.images, FileImageSet) and lazy.images.dataset == "table"
    assert np.array_equal(lazy.images.labels, in_memory.images.labels)
    stored, stats = attach_store(lazy, cache="auto")
    # every file resized, and the training classes' files at full size (train_crops=original)
    assert stats is not None and stats.built and stats.decoded == 12 + 6
    assert stored.images.store is not None and stored.images.crop_store is not None
    (x, y), = iterate_batches(stored.images, sequential_batches(12, 12), train=False)
    assert x.shape == (12, 3, 8, 8) and y.tolist() == in_memory.images.labels.tolist()
    for i, label in enumerate(y.tolist()):  # solid colours: every crop is its class's colour
        assert tuple(x[i].float().mean(dim=(1, 2)).round().int().tolist()) == COLOURS[label]


# ---- errors: one line each, what came, the fix --------------------------------------------
def _error(root: Path | str) -> str:
    return user_error("table", root, image_size=8)


def test_a_missing_table_a_folder_and_another_format(tmp_path: Path) -> None:
    message = _error(tmp_path / "nope.csv")
    assert f"{tmp_path / 'nope.csv'} does not exist" in message and ".parquet" in message
    assert "is a folder" in _error(tmp_path) and "--dataset folder" in _error(tmp_path)
    (tmp_path / "items.tsv").write_text("path\tlabel\n")
    message = _error(tmp_path / "items.tsv")
    assert "not a .csv or .parquet file" in message and "ends in .tsv" in message


def test_the_path_given_is_the_path_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    monkeypatch.chdir(tmp_path)
    _csv(tmp_path / "items.csv", [{"path": "gone.png", "label": "a"}])
    message = _error("items.csv")
    assert message.startswith("table: items.csv lists 1 image file that does not exist "
                              "(gone.png)")


def test_missing_columns_list_the_columns_found(tmp_path: Path) -> None:
    table = _csv(tmp_path / "t.csv", [{"file": "a.png", "class_id": 1, "split": "train"}])
    message = _error(table)
    assert "no column path or label" in message
    assert "its columns: file, class_id, split" in message


def test_missing_images_are_counted_and_the_first_named(tmp_path: Path) -> None:
    rows = _images(tmp_path, ["a", "b", "c", "d"])
    rows += [{"path": f"lost/{i}.png", "label": "a"} for i in range(5)]
    message = _error(_csv(tmp_path / "t.csv", rows))
    assert "lists 5 image files that do not exist (lost/0.png, lost/1.png, lost/2.png, ...)" \
        in message
    assert f"relative to {tmp_path}" in message


def test_an_unknown_split_names_the_value_and_the_rows(tmp_path: Path) -> None:
    split = {"a": "train", "b": "train", "c": "test", "d": "val"}
    message = _error(_csv(tmp_path / "t.csv", _images(tmp_path, list(split), split=split)))
    assert "has split 'val' in rows 7, 8" in message
    assert "write train, test or validation" in message


def test_a_label_in_both_splits_names_the_label_and_its_rows(tmp_path: Path) -> None:
    split = {"a": "train", "b": "train", "c": "test", "d": "test"}
    rows = _images(tmp_path, list(split), split=split)
    rows.append({"path": rows[0]["path"], "label": "c", "split": "train"})
    rows.append({"path": rows[0]["path"], "label": "a", "split": "validation"})
    message = _error(_csv(tmp_path / "t.csv", rows))
    assert "puts 2 labels in both the train and the test split" in message
    assert "'a' (train rows 1, 2, test row 10)" in message
    assert "'c' (train row 9, test rows 5, 6)" in message
    assert message.endswith("give each label one split")


def test_a_split_needs_two_classes(tmp_path: Path) -> None:
    split = {"a": "train", "b": "train", "c": "test"}
    message = _error(_csv(tmp_path / "t.csv", _images(tmp_path, list(split), split=split)))
    assert "has 1 class in its test split" in message and "at least 2 labels" in message
    split = {"a": "train", "b": "train"}
    message = _error(_csv(tmp_path / "u.csv", _images(tmp_path, list(split), split=split)))
    assert "has 0 classes in its test split" in message
    message = _error(_csv(tmp_path / "v.csv", _images(tmp_path, ["a", "b", "c"])))
    assert "has 3 classes (a, b, c); without a split column" in message
    assert "at least 4 labels" in message


def test_an_empty_table(tmp_path: Path) -> None:
    (tmp_path / "empty.csv").write_text("")
    assert "empty.csv is empty" in _error(tmp_path / "empty.csv")
    (tmp_path / "header.csv").write_text("path,label,split\n")
    assert "header.csv has no rows" in _error(tmp_path / "header.csv")
    (tmp_path / "blank.csv").write_text("path,label\nx.png,\n")
    assert "has no label in row 1" in _error(tmp_path / "blank.csv")


def test_a_parquet_table_without_pyarrow_says_how_to_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails
    message = _error(tmp_path / "t.parquet")
    assert "needs pyarrow" in message and "pip install pyarrow" in message


def test_a_broken_parquet_file(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow.parquet")
    (tmp_path / "t.parquet").write_text("path,label\n")
    assert "is not a readable Parquet file" in _error(tmp_path / "t.parquet")


# ---- real data ----------------------------------------------------------------------------
@pytest.mark.skipif(not OMNIGLOT.is_file(), reason="the Omniglot sample is not here")
def test_a_table_over_the_omniglot_sample(tmp_path: Path) -> None:
    with zipfile.ZipFile(OMNIGLOT) as archive:
        archive.extractall(tmp_path / "omniglot")
    files = sorted((tmp_path / "omniglot").rglob("*.png"))
    rows = [{"path": str(p.relative_to(tmp_path)),
             "label": f"{p.parent.parent.name}/{p.parent.name}"} for p in files]
    dataset = load_dataset("table", root=str(_csv(tmp_path / "omniglot.csv", rows)),
                           image_size=16)
    assert len(dataset.images) == len(files) == 136 * 20
    assert dataset.images.num_classes == 136
    assert dataset.train_classes.size == dataset.test_classes.size == 68
    assert np.bincount(dataset.images.labels).tolist() == [20] * 136


@pytest.mark.slow  # a real search: Ray starts (about 75 s on 2 cores)
def test_a_search_on_a_table_through_the_command_line(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = []
    for c in range(16):
        for i in range(6):
            rel = f"images/{c}/{i}.png"
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(tmp_path / rel)
            rows.append({"path": rel, "label": f"class{c}",
                         "split": "train" if c < 10 else "validation"})
    table = _csv(tmp_path / "items.csv", rows)
    out = tmp_path / "results"
    ray_tmp = tempfile.mkdtemp(prefix="dt", dir="/tmp")  # short: Ray's socket paths are limited
    proc = run_cli("run", "--dataset", "table", "--data-root", str(table), "--trials", "1",
                   "--concurrency", "1", "--scheduler", "none", "--no-retrain", "--set",
                   "epochs=1", "--set", "batch_size=16", "--set", "m_per_class=4", "--set",
                   "image_size=12", "--out", str(out), cache=tmp_path / "cache",
                   env={"RAY_TMPDIR": ray_tmp}, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trial_counts"]["completed"] == 1
    # validated on training classes held out by the fixed protocol (20% of 10), 6 images each
    assert summary["validation_set"]["classes"] == 2
    assert summary["validation_set"]["images"] == 12
