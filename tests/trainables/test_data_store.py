"""The decoded-image store (:mod:`trainables.data._store`): built once by concurrent processes,
read back bit-identical to a fresh decode, keyed by content, never read half-written, sized
before it is written; and its loader (crops cut on the host, resampled on the device)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import zipfile
from pathlib import Path

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


def _cub(root: Path, size: int = 64):
    return load_dataset("cub200", root=str(root), image_size=size)


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

    cfg = TrialConfig.from_flat({"dataset": "cub200", "data_root": str(tree.parent),
                                 "image_size": 64, "cache": "off"})
    with pytest.raises(UserError, match=f"cannot read image {bad}"):
        open_dataset(cfg)


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
    with pytest.raises(UserError, match=r"needs 0\.\d\d GiB but cache_limit_gb allows "
                                        r"0\.00 GiB; raise cache_limit_gb, or set cache=off"):
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
