"""The decoded-image store (:mod:`trainables.data._store`): built once by concurrent processes,
read back bit-identical to a fresh decode, keyed by content, never read half-written, sized
before it is written; and its loader (crops cut on the host, resampled on the device)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import shutil
import signal
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F

from dmlsearch.trainables.data import BatchLoader
from dmlsearch.trainables.data import attach_store
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.data import sequential_batches
from dmlsearch.trainables.data import store_folder
from dmlsearch.trainables.data._store import READY
from dmlsearch.trainables.data._store import decode_resized
from dmlsearch.trainables.data._store import open_store
from dmlsearch.trainables.data._store import resized_size
from dmlsearch.trainables.data._tree import decode_image
from dmlsearch.trainables.data.cub_like import write_cub_like
from dmlsearch.trainables.errors import UserError


@pytest.fixture(scope="module")
def cub_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cub_like(tmp_path_factory.mktemp("cub"), classes=4, images=24, seed=1)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("DMLSEARCH_CACHE", str(folder))
    return folder / "decoded"


def _cub(root: Path, size: int = 64, crops: str = "resized"):
    # the store's mechanics are tested on the resized store alone (the full-size one, which
    # train_crops=original adds, is built by the same code: see the tests at the end)
    return load_dataset("cub200", root=str(root), image_size=size, train_crops=crops)


def _copy_tree(tree: Path, to: Path) -> Path:
    import shutil

    return Path(shutil.copytree(tree, to / "CUB_200_2011"))


def test_the_store_holds_each_image_as_a_fresh_decode_resized_by_torchvision(
        cub_tree: Path, cache: Path) -> None:
    dataset, stats = attach_store(_cub(cub_tree), cache="auto")
    images = dataset.images
    assert stats is not None and stats.built and stats.decoded == len(images)
    assert images.store.folder.parent == cache
    for i in range(len(images)):
        fresh = decode_image(images.read_bytes(i), mode="RGB", where="", dataset="cub200")
        want = np.asarray(F.resize(fresh, images.transform.resize))  # today's eval resize
        np.testing.assert_array_equal(images.store.image(int(images.rows[i])), want)
    # the evaluation input from the store is bit for bit the old path's (decode + transform)
    with BatchLoader(images, train=False) as loader:
        (x, _), = loader.epoch([np.arange(len(images))])
    old = torch.stack([images.without_store().decode(i, train=False) for i in range(len(images))])
    assert torch.equal(x, old)


def test_exif_orientation_is_applied_before_storing(tmp_path: Path, cache: Path) -> None:
    from PIL import Image

    tree = write_cub_like(tmp_path, classes=2, images=4)
    first = sorted((tree / "images").rglob("*.jpg"))[0]
    upright = Image.open(first).convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: the reader turns it back
    upright.transpose(Image.ROTATE_90).save(first, exif=exif, quality=95)
    images = attach_store(_cub(tmp_path), cache="auto")[0].images
    row = int(images.rows[list(images.files).index(str(first.relative_to(tree)))])
    h, w = images.store.image(row).shape[:2]
    assert (w, h) == resized_size(upright.width, upright.height, images.transform.resize)


def _open(args: tuple[str, str]) -> tuple[bool, str]:
    import hashlib

    root, cache_env = args
    os.environ["DMLSEARCH_CACHE"] = cache_env
    dataset, stats = attach_store(_cub(Path(root)), cache="auto", workers=1)
    store = dataset.images.store
    digest = hashlib.sha256(bytes(store.pixels)).hexdigest()
    return stats.built, digest


def test_processes_opening_it_at_once_build_it_once(cub_tree: Path, cache: Path) -> None:
    env = os.environ["DMLSEARCH_CACHE"]
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        results = pool.map(_open, [(str(cub_tree), env)] * 3)
    assert sorted(built for built, _ in results) == [False, False, True]
    assert len({digest for _, digest in results}) == 1
    assert [p.name for p in cache.iterdir() if p.is_dir()] == [
        p.name for p in cache.iterdir() if (p / READY).is_file()]  # one, complete store


def test_a_changed_file_gives_another_store_and_unchanged_files_decode_nothing(
        cub_tree: Path, tmp_path: Path, cache: Path) -> None:
    tree = _copy_tree(cub_tree, tmp_path)
    first, stats = attach_store(_cub(tree.parent), cache="auto")
    again, stats_again = attach_store(_cub(tree.parent), cache="auto")
    assert stats.built and not stats_again.built and stats_again.decoded == 0
    assert again.images.store.folder == first.images.store.folder
    changed = sorted((tree / "images").rglob("*.jpg"))[3]
    time.sleep(0.01)
    changed.write_bytes(sorted((tree / "images").rglob("*.jpg"))[4].read_bytes())
    rebuilt, stats_rebuilt = attach_store(_cub(tree.parent), cache="auto")
    assert stats_rebuilt.built
    assert rebuilt.images.store.folder != first.images.store.folder


def test_a_truncated_jpeg_is_one_error_naming_it_and_leaves_no_store(
        cub_tree: Path, tmp_path: Path, cache: Path) -> None:
    tree = _copy_tree(cub_tree, tmp_path)
    bad = sorted((tree / "images").rglob("*.jpg"))[5]
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])  # the header still reads: PIL opens it fine
    with pytest.raises(UserError, match=f"cannot read image {bad}.*replace or delete that file"):
        attach_store(_cub(tree.parent), cache="auto")
    assert [p for p in cache.iterdir() if not p.name.endswith(".lock")] == []
    # cache=off checks every file before a search too (the driver's check)
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.trial import open_dataset
    from dmlsearch.trainables.trial import read_dataset

    cfg = TrialConfig.from_flat({"dataset": "cub200", "data_root": str(tree.parent),
                                 "image_size": 64, "cache": "off"})
    with pytest.raises(UserError, match=f"cannot read image {bad}"):  # the files, not the split
        open_dataset(cfg, dataset=read_dataset(cfg))  # (too few classes for preflight's)


def _build_slowly(root: str, env: str) -> None:
    os.environ["DMLSEARCH_CACHE"] = env
    from dmlsearch.trainables.data import _store

    decode = _store.decode_resized

    def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.5)
        return decode(*args, **kwargs)

    _store.decode_resized = slow
    attach_store(_cub(Path(root)), cache="auto", workers=1)


def test_a_builder_killed_mid_way_leaves_nothing_that_is_read(cub_tree: Path,
                                                              cache: Path) -> None:
    process = multiprocessing.get_context("spawn").Process(
        target=_build_slowly, args=(str(cub_tree), os.environ["DMLSEARCH_CACHE"]))
    process.start()
    deadline = time.time() + 120
    while not list(cache.glob(".*.building-*")) and time.time() < deadline:
        time.sleep(0.05)
    assert list(cache.glob(".*.building-*")), "the builder never started writing"
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    assert not [p for p in cache.iterdir() if (p / READY).exists()]  # nothing complete
    dataset, stats = attach_store(_cub(cub_tree), cache="auto")  # the lock died with it
    assert stats.built and not list(cache.glob(".*.building-*"))
    assert dataset.images.store.image(0).size > 0


def test_a_store_that_does_not_fit_is_an_error_saying_what_to_do(
        cub_tree: Path, cache: Path) -> None:
    # sizes under 0.01 GiB are said in MiB or KiB, never "0.00 GiB"
    with pytest.raises(UserError, match=r"needs \d+\.\d\d [KM]iB but cache_limit_gb allows "
                                        r"1\.05 KiB; raise cache_limit_gb, or set cache=off"):
        attach_store(_cub(cub_tree), cache="auto", limit_gb=1e-6)
    assert not cache.exists() or not any(cache.glob("*/" + READY))


def test_under_a_limit_the_least_recently_used_store_makes_room(
        cub_tree: Path, cache: Path) -> None:
    small, _ = attach_store(_cub(cub_tree, size=32), cache="auto")
    size = small.images.store.nbytes
    large = attach_store(_cub(cub_tree, size=64), cache="auto", limit_gb=0)[0]
    limit = (large.images.store.nbytes + size / 2) / 2**30  # room for one of them only
    again, stats = attach_store(_cub(cub_tree, size=32), cache="auto", limit_gb=limit)
    assert not stats.built  # it was there: nothing to make room for
    time.sleep(0.01)
    attach_store(_cub(cub_tree, size=48), cache="auto", limit_gb=limit)
    remaining = {p.name for p in cache.iterdir() if (p / READY).is_file()}
    assert large.images.store.folder.name not in remaining  # the least recently used went
    assert again.images.store.folder.name in remaining
    assert again.images.store.image(0).size > 0  # the pages of an open store stay readable


def test_archive_members_are_stored_like_files(cub_tree: Path, tmp_path: Path,
                                               cache: Path) -> None:
    archive = tmp_path / "cub.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for path in sorted(cub_tree.rglob("*")):
            if path.is_file():
                handle.write(path, str(path.relative_to(cub_tree.parent)))
    images = _cub(cub_tree).images
    store, stats = open_store(str(archive), np.asarray(
        [f"CUB_200_2011/{f}" for f in images.files], dtype=object), archive=True, mode="RGB",
        short=images.transform.resize, dataset="cub200", cache="auto")
    on_disk = attach_store(_cub(cub_tree), cache="auto")[0].images.store
    assert stats.built
    np.testing.assert_array_equal(np.asarray(store.pixels), np.asarray(on_disk.pixels))


def test_shm_and_folder_settings_name_their_folders(tmp_path: Path) -> None:
    assert str(store_folder("shm")).startswith("/dev/shm/dmlsearch-")
    assert store_folder(str(tmp_path / "x")) == tmp_path / "x"


# ---- the loader ---------------------------------------------------------------------------

def test_training_crops_repeat_for_the_same_epoch_and_differ_between_epochs(
        cub_tree: Path, cache: Path) -> None:
    images = attach_store(_cub(cub_tree), cache="auto")[0].images
    batches = sequential_batches(len(images), 8)

    def crops(index: int | None, seed: int = 4) -> torch.Tensor:
        with BatchLoader(images, train=True, seed=seed) as loader:
            return torch.cat([x for x, _ in loader.epoch(batches, index=index)])

    first = crops(3)
    assert first.shape == (len(images), 3, 64, 64) and first.dtype == torch.uint8
    assert torch.equal(first, crops(3))  # a resumed fit draws the crops of its epoch again
    assert not torch.equal(first, crops(4))
    assert not torch.equal(first, crops(3, seed=5))
    with BatchLoader(images, train=True, seed=4) as loader:  # without an index: counted
        counted = [torch.cat([x for x, _ in loader.epoch(batches)]) for _ in range(2)]
    assert torch.equal(counted[0], crops(0)) and torch.equal(counted[1], crops(1))


def test_an_epoch_left_unfinished_does_not_hold_up_the_next(cub_tree: Path, cache: Path) -> None:
    images = attach_store(_cub(cub_tree), cache="auto")[0].images
    batches = sequential_batches(len(images), 2)
    with BatchLoader(images, train=True, seed=0) as loader:
        stream = loader.epoch(batches)
        next(stream)  # the thread runs ahead and blocks: nobody takes its batches
        time.sleep(0.2)
        assert sum(len(x) for x, _ in loader.epoch(batches)) == len(images)


def test_labels_follow_their_images(cub_tree: Path, cache: Path) -> None:
    images = attach_store(_cub(cub_tree), cache="auto")[0].images
    order = np.random.default_rng(0).permutation(len(images))
    with BatchLoader(images, train=False) as loader:
        got = [(x, y) for x, y in loader.epoch([order[:10], order[10:]])]
    assert torch.equal(torch.cat([y for _, y in got]), torch.from_numpy(images.labels[order]))
    with BatchLoader(images, train=False) as loader:
        (x, _), = loader.epoch([order])
    assert torch.equal(torch.cat([x for x, _ in got]), x)


def test_decode_resized_matches_torchvision_resize_for_grey_images(cub_tree: Path) -> None:
    from dmlsearch.trainables.data._store import _Source

    source = _Source(root=str(cub_tree), archive=False, mode="L", dataset="cub200")
    name = str(_cub(cub_tree).images.files[0])
    image = decode_image(source.read(name), mode="L", where=name, dataset="cub200")
    want = np.asarray(F.resize(image, 37))
    np.testing.assert_array_equal(decode_resized(source, name, 37)[:, :, 0], want)


# ---- where training crops come from (train_crops) -------------------------------------------
# The authors' pipelines: Proxy-Anchor, the thesis and MemVir crop RandomResizedCrop(224) out of
# the photo as loaded (train_crops=original); the MS loss code resizes it to 256 first
# (train_crops=resized). Evaluation is Resize(256) + CenterCrop(224) for all of them.

def _upsampled(heights: np.ndarray, widths: np.ndarray, size: int) -> float:
    """Share of crop boxes with fewer source pixels than the ``size x size`` crop they become."""
    return float(np.mean(heights * widths < size * size))


def _torchvision_boxes(sizes: list[tuple[int, int]], count: int) -> np.ndarray:
    """``[count, 4]`` boxes of torchvision's RandomResizedCrop on images of these (w, h)."""
    from PIL import Image
    from torchvision.transforms import RandomResizedCrop

    torch.manual_seed(0)
    blanks = [Image.new("RGB", size) for size in sizes]
    return np.array([RandomResizedCrop.get_params(blanks[k % len(blanks)], (0.08, 1.0),
                                                  (3 / 4, 4 / 3)) for k in range(count)])


def test_original_crops_are_drawn_on_the_full_size_image_as_the_authors_draw_them(
        cub_tree: Path, cache: Path) -> None:
    size = 224
    dataset, stats = attach_store(_cub(cub_tree, size, "original"), cache="auto")
    images, train = dataset.images, dataset.train()
    crops = images.crop_store
    assert crops is not None and crops.short is None and stats.crop_key == crops.folder.name
    assert crops.folder != images.store.folder and crops.folder.parent == cache
    # the full-size store holds the training classes' images only, each as decoded
    assert len(crops) == len(train) and (dataset.test().crop_rows == -1).all()
    decoded = [np.asarray(train.load(i)) for i in range(len(train))]
    for i, pixels in enumerate(decoded):
        np.testing.assert_array_equal(crops.image(int(train.crop_rows[i])), pixels)
    # the loader draws its boxes on those full-size images
    with BatchLoader(train, train=True, seed=0) as loader:
        cutter = loader._store_loader
        index = np.arange(4000) % len(train)
        rows = cutter.source_rows[index]
        boxes = cutter._boxes(rows, np.random.default_rng(0))
    full_h, full_w = crops.heights[rows], crops.widths[rows]
    assert (boxes[:, 0] + boxes[:, 2] <= full_h).all()
    assert (boxes[:, 1] + boxes[:, 3] <= full_w).all()
    small_h = images.store.heights[train.rows[index]]
    assert (boxes[:, 2] > small_h).mean() > 0.2  # many are taller than the 256-px image
    # so as few crops are upsampled as in the authors' pipeline (27% of the crops of a 500 x 375
    # photo; these CUB-like photos are up to 15% smaller: about a third), where cropping its
    # 256-px resize (the MS code's pipeline, the store's before) upsamples 73% of them
    ours = _upsampled(boxes[:, 2], boxes[:, 3], size)
    sizes = [(p.shape[1], p.shape[0]) for p in decoded]
    authors = _torchvision_boxes(sizes, 4000)
    assert abs(ours - _upsampled(authors[:, 2], authors[:, 3], size)) < 0.03
    assert _upsampled(*_torchvision_boxes([(500, 375)], 4000)[:, 2:].T, size) < 0.3
    resized = [resized_size(w, h, images.transform.resize) for w, h in sizes]
    ms_code = _torchvision_boxes(resized, 4000)
    assert ours < 0.4 and _upsampled(ms_code[:, 2], ms_code[:, 3], size) > 0.65


def _expected_epoch(images, source, source_rows, batches, seed: int, index: int) -> torch.Tensor:
    """A store-fed training epoch rebuilt from the loader's documented steps: boxes and flips
    drawn from default_rng((seed, index)), batch by batch, cut out of ``source`` and resampled
    with torchvision's tensor kernel."""
    from dmlsearch.trainables.data import _augment as aug

    rng = np.random.default_rng((seed, index))
    out = []
    for batch in batches:
        rows = source_rows[batch]
        boxes = aug.rrc_boxes(source.heights[rows], source.widths[rows], rng)
        flips = torch.from_numpy(rng.random(len(rows)) < 0.5)
        height, width = aug.padded_shape(boxes, exact=False)
        cut = np.zeros((len(rows), height, width, source.channels), dtype=np.uint8)
        aug.cut_crops([source.image(int(r)) for r in rows], boxes, cut, exact=False)
        out.append(aug.resize_crops(torch.from_numpy(cut), boxes[:, 2:], images.image_size,
                                    flips, method="interpolate"))
    return torch.cat(out)


@pytest.mark.parametrize("crops", ["resized", "original"])
def test_training_crops_come_from_the_store_the_setting_names(
        cub_tree: Path, cache: Path, crops: str) -> None:
    from dmlsearch.trainables.data._store import store_key

    dataset, stats = attach_store(_cub(cub_tree, 64, crops), cache="auto")
    train = dataset.train()
    # resized: one store, keyed as before this setting existed, crops cut as before
    assert stats.key == store_key(str(train.root), dataset.images.files, archive=False,
                                  mode="RGB", short=train.transform.resize)
    if crops == "resized":
        assert stats.crop_key is None and train.crop_store is None
        source, rows = train.store, train.rows
    else:
        assert stats.crop_key not in (None, stats.key)
        source, rows = train.crop_store, train.crop_rows
    batches = sequential_batches(len(train), 5)
    with BatchLoader(train, train=True, seed=4) as loader:
        got = torch.cat([x for x, _ in loader.epoch(batches, index=3)])
    assert torch.equal(got, _expected_epoch(train, source, rows, batches, seed=4, index=3))


@pytest.mark.parametrize("crops", ["resized", "original"])
def test_the_evaluation_input_is_the_same_bit_for_bit_whatever_the_setting(
        cub_tree: Path, cache: Path, crops: str) -> None:
    images = attach_store(_cub(cub_tree, 64, crops), cache="auto")[0].images
    with BatchLoader(images, train=False) as loader:
        (stored, _), = loader.epoch([np.arange(len(images))])
    with BatchLoader(images.without_store(), train=False) as loader:
        (off, _), = loader.epoch([np.arange(len(images))])
    want = torch.stack([
        torch.from_numpy(np.array(F.center_crop(F.resize(images.load(i), 73), [64, 64])))
        .permute(2, 0, 1) for i in range(len(images))])  # Resize(73) + CenterCrop(64)
    assert torch.equal(stored, want) and torch.equal(off, want)


def test_the_full_size_store_has_its_own_key_shared_by_every_image_size(
        cub_tree: Path, cache: Path) -> None:
    first, stats = attach_store(_cub(cub_tree, 64, "original"), cache="auto")
    assert stats.built and stats.decoded == len(first.images) + len(first.train())
    again, stats_again = attach_store(_cub(cub_tree, 64, "original"), cache="auto")
    assert not stats_again.built and stats_again.decoded == 0
    resized, stats_resized = attach_store(_cub(cub_tree, 64, "resized"), cache="auto")
    assert not stats_resized.built  # evaluation's store is the one resized trials use
    assert resized.images.store.folder == first.images.store.folder
    other, stats_other = attach_store(_cub(cub_tree, 48, "original"), cache="auto")
    assert stats_other.decoded == len(first.images)  # a new resized store, the same full one
    assert stats_other.crop_key == stats.crop_key != stats.key
    assert len({p.name for p in cache.iterdir() if (p / READY).is_file()}) == 3


@pytest.mark.parametrize("crops", ["resized", "original"])
def test_cache_off_crops_the_same_pixels_as_the_store(cub_tree: Path, cache: Path,
                                                       crops: str) -> None:
    from dmlsearch.trainables.data import _augment as aug
    from dmlsearch.trainables.data._transforms import apply_transform
    from dmlsearch.trainables.data._transforms import rrc_box
    from dmlsearch.trainables.data._transforms import train_source

    dataset = attach_store(_cub(cub_tree, 64, crops), cache="auto")[0]
    train = dataset.train()
    spec = train.transform
    source, rows = ((train.crop_store, train.crop_rows) if crops == "original"
                    else (train.store, train.rows))
    diffs = []
    for i in range(len(train)):
        decoded = train.load(i)
        stored = source.image(int(rows[i]))
        # the image cache=off crops from is the store's, bit for bit
        np.testing.assert_array_equal(np.asarray(train_source(decoded, spec)), stored)
        for draw in range(4):  # the same generator: the same box and flip
            off = apply_transform(decoded, spec, train=True,
                                  rng=np.random.default_rng((i, draw)))
            rng = np.random.default_rng((i, draw))
            box = np.array([rrc_box(stored.shape[1], stored.shape[0], rng)])
            flip = torch.tensor([rng.random() < 0.5])
            height, width = aug.padded_shape(box, exact=False)
            cut = np.zeros((1, height, width, 3), dtype=np.uint8)
            aug.cut_crops([stored], box, cut, exact=False)
            ours = aug.resize_crops(torch.from_numpy(cut), box[:, 2:], spec.size, flip,
                                    method="interpolate")[0]
            diffs.append((ours.int() - off.int()).abs().flatten())
    # the resampling kernels (PIL's for cache=off, torch's on the store) differ by at most one
    # grey level, on about 2% of the values (docs/design.md)
    diff = torch.cat(diffs)
    assert int(diff.max()) <= 1 and float((diff > 0).float().mean()) < 0.05


def test_original_crops_are_refused_outside_the_training_classes(cub_tree: Path,
                                                                 cache: Path) -> None:
    dataset = attach_store(_cub(cub_tree, 64, "original"), cache="auto")[0]
    test = dataset.test()
    with BatchLoader(test, train=False) as loader:  # evaluation reads the resized store
        assert sum(len(x) for x, _ in loader.epoch([np.arange(len(test))])) == len(test)
    with BatchLoader(test, train=True, seed=0) as loader, pytest.raises(
            UserError, match=r"is not in the full-size store of the training classes.*train on "
                             r"the dataset's training classes only"):
        next(iter(loader.epoch([np.arange(len(test))])))
    with pytest.raises(UserError, match="train_crops must be one of original, resized, got"):
        _cub(cub_tree, 64, "thumbnail")


def test_a_full_size_store_that_does_not_fit_keeps_the_resized_one_and_says_what_to_do(
        cub_tree: Path, cache: Path) -> None:
    from PIL import Image

    resized = attach_store(_cub(cub_tree, 224, "resized"), cache="auto")[0].images.store
    dataset = _cub(cub_tree, 224, "original")
    full = 0
    for name in dataset.train().files:
        with Image.open(cub_tree / str(name)) as image:
            full += image.width * image.height * 3
    assert full < resized.nbytes  # so either would fit alone, where both do not:
    limit = (resized.nbytes + full / 2) / 2**30
    with pytest.raises(UserError, match=r"full-size decoded store of cub200 .* needs .* besides "
                                        r"the \d+\.\d\d [KM]iB of the store it goes with .* raise "
                                        r"cache_limit_gb, set train_crops=resized"):
        attach_store(dataset, cache="auto", limit_gb=limit)
    assert (resized.folder / READY).is_file()  # not removed to make room for the other


# ---- a store is verified before it is trusted; no lock file outlives its holder -------------
def _damage(store: Path, how: str) -> None:
    pixels = store / "pixels.u8"
    if how == "pixels cut in half":
        os.truncate(pixels, pixels.stat().st_size // 2)  # a full disk, an interrupted copy
    elif how == "pixels empty":
        os.truncate(pixels, 0)
    elif how == "pixels one byte long":
        with open(pixels, "ab") as handle:
            handle.write(b"\0")
    elif how == "index corrupt":
        (store / "index.npy").write_bytes(os.urandom(200))
    elif how == "meta cut short":
        meta = (store / "meta.json").read_bytes()
        (store / "meta.json").write_bytes(meta[: len(meta) // 2])
    elif how == "no READY":
        (store / READY).unlink()
    else:
        raise AssertionError(how)


_DAMAGES = {"pixels cut in half": "cut short", "pixels empty": "has 0 bytes of the .* cut short",
            "pixels one byte long": "more than the", "index corrupt": "index.npy cannot be read",
            "meta cut short": "meta.json cannot be read", "no READY": "no READY marker"}


@pytest.mark.parametrize("how", list(_DAMAGES))
def test_a_damaged_store_is_rebuilt_to_the_same_pixels_with_one_line_naming_it(
        how: str, cub_tree: Path, cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    first, _ = attach_store(_cub(cub_tree), cache="auto", workers=1)
    folder = first.images.store.folder
    original = np.array(first.images.store.pixels)  # a copy, not the mapped pages
    del first
    _damage(folder, how)
    with caplog.at_level("WARNING", logger="dmlsearch.trainables.data._store"):
        again, stats = attach_store(_cub(cub_tree), cache="auto", workers=1)
    assert stats.built and stats.decoded == len(again.images)
    np.testing.assert_array_equal(np.asarray(again.images.store.pixels), original)
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 1 and str(folder) in lines[0], lines
    assert re.search(_DAMAGES[how], lines[0]), lines[0]
    assert sorted(p.name for p in cache.iterdir()) == [folder.name]  # nothing aside, no lock
    # and the next open trusts the rebuilt store
    assert not attach_store(_cub(cub_tree), cache="auto", workers=1)[1].built


def test_a_store_damaged_after_it_was_opened_is_named_where_a_trial_reads_it(
        cub_tree: Path, cache: Path) -> None:
    import pickle

    dataset, _ = attach_store(_cub(cub_tree), cache="auto", workers=1)
    shipped = pickle.dumps(dataset.images.store)  # what a trial receives: the folder
    folder = dataset.images.store.folder
    os.truncate(folder / "pixels.u8", 1000)
    with pytest.raises(UserError) as caught:
        pickle.loads(shipped)
    message = str(caught.value)
    assert "\n" not in message and str(folder) in message
    assert "cut short" in message and "delete that folder" in message and "cache=off" in message


def test_a_damaged_store_that_cannot_be_rebuilt_is_one_line_naming_it(
        cub_tree: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dataset, _ = attach_store(_cub(cub_tree), cache="auto", workers=1)
    folder = dataset.images.store.folder
    os.truncate(folder / "pixels.u8", 0)
    # the rebuild does not fit: removed, and the error says what was wrong and what to do
    with pytest.raises(UserError) as caught:
        attach_store(_cub(cub_tree), cache="auto", workers=1, limit_gb=1e-6)
    message = str(caught.value)
    assert "\n" not in message and str(folder) in message and "cut short" in message
    assert "building it again failed" in message and "cache=off" in message
    assert list(cache.iterdir()) == []  # the damaged store went, and its lock file
    # a damaged store that cannot be removed (a folder of another user's, say)
    attach_store(_cub(cub_tree), cache="auto", workers=1)
    os.truncate(folder / "pixels.u8", 10)
    from dmlsearch.trainables.data import _store

    def refuse(*args: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_store.os, "rename", refuse)
    with pytest.raises(UserError, match=rf"^the decoded-image store {re.escape(str(folder))} is "
                                        r"damaged \(.*cut short.*\) and cannot be removed "
                                        r"\(Permission denied\): delete that folder, or set "
                                        r"cache=off$"):
        attach_store(_cub(cub_tree), cache="auto", workers=1)
    assert not list(cache.glob("*.lock"))


_BUILD_SLOWLY = """
import os, sys, time
from pathlib import Path
from dmlsearch.trainables.data import _store, attach_store, load_dataset
decode = _store.decode_resized
def slow(*args, **kwargs):
    time.sleep(0.3)
    return decode(*args, **kwargs)
_store.decode_resized = slow
attach_store(load_dataset("cub200", root=sys.argv[1], image_size=64, train_crops="resized"),
             cache="auto", workers=1)
"""


def test_a_build_killed_after_it_started_writing_leaves_no_lock_or_half_store(
        cub_tree: Path, cache: Path) -> None:
    import subprocess
    import sys

    builder = subprocess.Popen([sys.executable, "-c", _BUILD_SLOWLY, str(cub_tree)],
                               env=dict(os.environ), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline, written = time.time() + 120, False
        while not written and builder.poll() is None and time.time() < deadline:
            time.sleep(0.05)
            for pixels in cache.glob(".*.building-*/pixels.u8"):
                with contextlib.suppress(OSError):
                    written = bool(np.fromfile(pixels, dtype=np.uint8).any())
        assert written, "the builder never started writing its pixels"
        os.kill(builder.pid, signal.SIGKILL)
    finally:
        builder.kill()
        builder.wait()
    assert builder.returncode == -signal.SIGKILL
    assert list(cache.glob("*.lock")) and list(cache.glob(".*.building-*"))  # what it left
    dataset, stats = attach_store(_cub(cub_tree), cache="auto", workers=1)
    assert stats.built and dataset.images.store.image(0).size > 0
    assert sorted(p.name for p in cache.iterdir()) == [dataset.images.store.folder.name]


def test_no_lock_file_is_left_after_a_build_that_fails_or_succeeds(
        cub_tree: Path, tmp_path: Path, cache: Path) -> None:
    attach_store(_cub(cub_tree), cache="auto", workers=1)
    assert not list(cache.glob("*.lock"))
    with pytest.raises(UserError):
        attach_store(_cub(cub_tree, size=32), cache="auto", workers=1, limit_gb=1e-6)
    tree = _copy_tree(cub_tree, tmp_path)
    bad = sorted((tree / "images").rglob("*.jpg"))[5]
    bad.write_bytes(bad.read_bytes()[:2000])
    with pytest.raises(UserError):
        attach_store(_cub(tree.parent), cache="auto", workers=1)
    assert not list(cache.glob("*.lock")) and not list(cache.glob(".*"))


def _hold_lock(path: str, held: multiprocessing.synchronize.Event,
               go: multiprocessing.synchronize.Event) -> None:
    from dmlsearch.trainables.data._store import _locked

    with _locked(Path(path)):
        held.set()
        go.wait(30)


def test_a_waiter_on_a_removed_lock_file_locks_again_so_one_process_holds_it(
        tmp_path: Path) -> None:
    import fcntl
    import threading

    from dmlsearch.trainables.data._store import _locked

    context = multiprocessing.get_context("fork")
    path = tmp_path / "key.lock"
    held, go = context.Event(), context.Event()
    holder = context.Process(target=_hold_lock, args=(str(path), held, go))
    holder.start()
    assert held.wait(30)
    seen: list[object] = []

    def wait_for_it() -> None:  # opens the holder's file, then waits on it
        with _locked(path), open(path) as other:  # another open file description
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append("the lock on the file the path names was free")
            except BlockingIOError:
                seen.append("held")

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    time.sleep(0.5)  # the waiter has opened the file the holder will remove
    go.set()  # the holder removes it, then lets go
    waiter.join(30)
    holder.join(30)
    assert seen == ["held"] and not path.exists()


@pytest.mark.parametrize("content", [b"", b"not an image at all"])
def test_an_unreadable_image_is_named_by_its_path_and_said_in_words(
        content: bytes, tmp_path: Path, cache: Path) -> None:
    from dmlsearch.trainables.data import check_decodable

    tree = write_cub_like(tmp_path, classes=2, images=4)
    bad = sorted((tree / "images").rglob("*.jpg"))[1]
    bad.write_bytes(content)
    why = "the file is empty" if not content else "not an image format PIL can read"
    dataset = _cub(tree.parent)
    for attempt in (lambda: attach_store(dataset, cache="auto", workers=1),  # headers first
                    lambda: check_decodable(dataset.images, workers=1)):  # cache=off's check
        with pytest.raises(UserError) as caught:
            attempt()
        message = str(caught.value)
        assert f"cannot read image {bad} ({why}): replace or delete that file" in message
        assert "<_io." not in message and "object at 0x" not in message


@pytest.mark.parametrize(("n", "said"), [(0, "0 bytes"), (1000, "1000 bytes"),
                                         (1024, "1.00 KiB"), (80 * 2**10, "80.00 KiB"),
                                         (5 * 2**20, "5.00 MiB"),
                                         (10 * 2**20, "10.00 MiB"), (11 * 2**20, "0.01 GiB"),
                                         (3 * 2**30, "3.00 GiB")])
def test_sizes_are_said_in_a_unit_that_shows_them(n: int, said: str) -> None:
    from dmlsearch.trainables.data._store import _size

    assert _size(n) == said


# ---- builders that die, and the cache folder they leave (issue 35) ----------------------------
_BUILD_SLOWLY_IN_A_POOL = """
import sys, time
from dmlsearch.trainables.data import _store, attach_store, load_dataset
decode = _store.decode_resized
def slow(*args, **kwargs):  # the forked decoding workers inherit it
    time.sleep(1.0)
    return decode(*args, **kwargs)
_store.decode_resized = slow
attach_store(load_dataset("cub200", root=sys.argv[1], image_size=int(sys.argv[2]),
                          train_crops="resized"), cache="auto", workers=2)
"""


def _start_slow_builder(tree: Path, cache: Path, size: int) -> tuple[Any, Path]:
    """A real process building the store of ``tree`` at ``size`` with two decoding workers,
    once it has started writing its pixels; and its half-built folder."""
    import subprocess
    import sys

    builder = subprocess.Popen([sys.executable, "-c", _BUILD_SLOWLY_IN_A_POOL, str(tree),
                                str(size)], env=dict(os.environ), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while builder.poll() is None and time.time() < deadline:
        for pixels in cache.glob(f".*.building-{builder.pid}/pixels.u8"):
            with contextlib.suppress(OSError):
                if np.fromfile(pixels, dtype=np.uint8).any():
                    return builder, pixels.parent
        time.sleep(0.05)
    builder.kill()
    raise AssertionError(f"the builder never started writing: {builder.communicate()[1][-2000:]}")


def test_a_builder_killed_with_its_workers_prints_nothing_and_the_next_opener_cleans_up(
        cub_tree: Path, cache: Path) -> None:
    builder, half_built = _start_slow_builder(cub_tree, cache, size=64)
    os.kill(builder.pid, signal.SIGKILL)
    # stderr ends when every process holding it (the builder and its workers) has exited: its
    # workers die with it, printing nothing (no BrokenPipeError from a pool whose parent died)
    _, err = builder.communicate(timeout=120)
    assert builder.returncode == -signal.SIGKILL
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-3000:]
    assert half_built.is_dir() and list(cache.glob("*.lock"))  # what a dead builder leaves
    # the next process that opens the cache, for another store, removes it: its builder is gone
    other, stats = attach_store(_cub(cub_tree, size=32), cache="auto", workers=1)
    assert stats.built
    assert sorted(p.name for p in cache.iterdir()) == [other.images.store.folder.name]


def test_a_store_being_built_counts_under_the_limit_and_is_left_alone(
        cub_tree: Path, cache: Path) -> None:
    small, _ = attach_store(_cub(cub_tree, size=32), cache="auto", workers=1)
    shutil.rmtree(small.images.store.folder)  # its size known; the folder empty again
    builder, half_built = _start_slow_builder(cub_tree, cache, size=64)
    try:
        building = sum(f.stat().st_size for f in half_built.iterdir() if f.is_file())
        limit = (small.images.store.nbytes + building / 2) / 2**30  # room for one of them only
        with pytest.raises(UserError, match=r"needs [\d.]+ [KM]iB besides the [\d.]+ [KM]iB of "
                                            r"the stores other processes are building but "
                                            r"cache_limit_gb allows"):
            attach_store(_cub(cub_tree, size=32), cache="auto", workers=1, limit_gb=limit)
        assert half_built.is_dir()  # a live builder's folder is never swept
    finally:
        builder.kill()
        builder.communicate(timeout=120)


def test_the_cache_words_are_the_cache_setting_s_declared_choices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Declared once (trainables/config.py), not repeated: each word but off has its folder."""
    from dmlsearch.trainables.config import SETTINGS
    from dmlsearch.trainables.data import CACHE_CHOICES

    assert CACHE_CHOICES == SETTINGS["cache"].choices == ("auto", "shm", "off")
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path))
    folders = {word: store_folder(word) for word in CACHE_CHOICES if word != "off"}
    assert folders["auto"] == tmp_path / "decoded"
    assert folders["shm"].parent == Path("/dev/shm")
    assert store_folder(str(tmp_path / "mine")) == tmp_path / "mine"  # any other word: a folder
