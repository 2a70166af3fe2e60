"""Benchmark: the decoded-image store on a CPU (issue 23's CPU-side goals), ratios in one run.

On a CUB-sized tree of JPEGs written at the start (:mod:`dmlsearch.trainables.data.cub_like`:
200 classes, 11,788 photos of about 500 x 375, nothing downloaded):

1. **epoch** — the CPU time (``time.process_time``, one torch thread) of a training epoch's
   batches (RandomResizedCrop 224 + flip, batches of 100, the training classes' images):
   decoding the JPEGs (``cache=off``: what every trial did every epoch) against reading them
   from the store — the host's share on a GPU machine (drawing the boxes and cutting the crops;
   the resampling runs on the GPU) and the whole CPU path (cut, then resampled on the CPU).
   Interleaved rounds over a fixed subset of ``--epoch-images`` images; medians, per image and
   scaled to the epoch.
2. **memory** — 4 trial processes open the store and read an epoch of it at once: each one's
   resident memory (RSS) and proportional share (PSS, which splits a shared page between the
   processes that map it), against the store's size: one copy in memory, or four?
3. **checkpoint** — the time a checkpoint holds the training thread for ResNet50-512 with AdamW
   (the thesis's setting): before (everything, best weights too, saved with ``torch.save`` after
   every epoch, then copied by Ray into its storage) and now (a host snapshot; the save runs in
   the background; Ray's copy at the next report, every ``checkpoint_every`` epochs), as a share
   of a CUB-sized epoch of the same model (its images/s measured here on a few batches; give
   ``--epoch-seconds`` to judge against a GPU's epoch instead).
4. **opens** — real searches (``dmlsearch run``, 4 trials, 2 epochs, ``smallcnn`` at 32 px) on a
   2,400-image CUB-shaped tree, counting how often the JPEG files are opened (Linux inotify, no
   change to the code measured): with ``cache=off``, with the store (built by the first search),
   and a second search on the unchanged files.
5. **crops** — ``train_crops=original`` (training crops cut from the full-size images: a second,
   full-size store of the training classes) against ``resized`` (cut from the 256-px store):
   each store's build time (fresh folders, interleaved rounds) and size, and the CPU time of a
   training epoch per setting, with ``cache=off`` and from the stores (the host's share on a GPU
   machine, and the whole CPU path), interleaved in the same process; and, for the design not
   taken, evaluation's Resize(256) + CenterCrop(224) made with PIL from full-size pixels
   against the centre crops cut from the resized store. ``crops_gpu`` (on a CUDA machine): the
   images/s of store-fed training epochs on the GPU (the thread cuts, ``roi_align`` resamples)
   per setting, batches of 180, interleaved rounds, and of the host thread's cutting alone.

The sections before ``crops`` use ``train_crops=resized`` (the store as it was when they were
recorded).

    python benchmarks/decoded_store.py [--images 11788]
        [--sections epoch memory checkpoint opens crops] [--dir DIR] [--out results.json] [--small]

About 25 minutes on 2 CPU cores (the JPEGs take ~4 of them); ``--small`` a few.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing as mp
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import BatchLoader
from dmlsearch.trainables.data import attach_store
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.data._store import open_store
from dmlsearch.trainables.data.cub_like import write_cub_like

SIZE = 224
BATCH = 100


def _train_images(root: Path, cache: str, crops: str = "resized") -> Any:
    dataset = load_dataset("cub200", root=str(root), image_size=SIZE, train_crops=crops)
    dataset, _ = attach_store(dataset, cache=cache)
    return dataset.train()


# ---- 1. epoch CPU time ---------------------------------------------------------------------------
def _batches(count: int, subset: np.ndarray) -> list[np.ndarray]:
    return [subset[i:i + BATCH] for i in range(0, len(subset), BATCH)][:count]


def bench_epoch(root: Path, images: int, rounds: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    stored = _train_images(root, "auto")
    decoded = stored.without_store()
    subset = np.random.default_rng(0).permutation(len(stored))[:images]
    batches = _batches(len(subset), subset)
    runs: dict[str, list[float]] = {"decode": [], "store_host": [], "store_cpu": []}
    for r in range(rounds):
        with BatchLoader(decoded, train=True, seed=r) as loader:  # cache=off: in this process
            started = time.process_time()
            for _ in loader.epoch(batches):
                pass
            runs["decode"].append(time.process_time() - started)
        with BatchLoader(stored, train=True, seed=r, device="cpu") as loader:
            cutter = loader._store_loader
            rng = np.random.default_rng((r, 0))
            started = time.process_time()
            for index in batches:  # the host's work when a GPU resamples: boxes and cuts
                cut = cutter._cut(index, rng)
                cutter._free.put(cut.buffer)
            runs["store_host"].append(time.process_time() - started)
            started = time.process_time()
            for _ in loader.epoch(batches, index=r):
                pass
            runs["store_cpu"].append(time.process_time() - started)
    per_image = {k: statistics.median(v) / len(subset) for k, v in runs.items()}
    return {"epoch_images": len(stored), "measured_images": len(subset), "rounds": rounds,
            "cpu_seconds_per_image": per_image,
            "cpu_seconds_per_epoch": {k: v * len(stored) for k, v in per_image.items()},
            "spread": {k: [min(v) / len(subset), max(v) / len(subset)] for k, v in runs.items()},
            "ratio_store_host_to_decode": per_image["store_host"] / per_image["decode"],
            "ratio_store_cpu_to_decode": per_image["store_cpu"] / per_image["decode"]}


# ---- 2. memory -----------------------------------------------------------------------------------
def _smaps() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        key, _, value = line.partition(":")
        out[key] = int(value.split()[0]) * 1024
    return out


def _reader(root: str, cache_env: str, start: Any, out: Any) -> None:
    os.environ["DMLSEARCH_CACHE"] = cache_env
    torch.set_num_threads(1)
    images = _train_images(Path(root), "auto")
    before = _smaps()
    start.wait()
    with BatchLoader(images, train=True, seed=0, device="cpu") as loader:
        cutter = loader._store_loader
        rng = np.random.default_rng(0)
        for index in _batches(10**9, np.arange(len(images))):
            cutter._free.put(cutter._cut(index, rng).buffer)
    start.wait()  # everybody has read the whole epoch: measure while all map it
    after = _smaps()
    out.put({"before": before, "after": after, "store_bytes": images.store.nbytes})
    start.wait()


def bench_memory(root: Path, trials: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(trials), ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(str(root), os.environ["DMLSEARCH_CACHE"], start,
                                                out)) for _ in range(trials)]
    for p in procs:
        p.start()
    rows = [out.get(timeout=1800) for _ in range(trials)]
    for p in procs:
        p.join()
    store = rows[0]["store_bytes"]
    grown_rss = [r["after"]["Rss"] - r["before"]["Rss"] for r in rows]
    grown_pss = [r["after"]["Pss"] - r["before"]["Pss"] for r in rows]
    file_pss = [r["after"].get("Pss_File", 0) - r["before"].get("Pss_File", 0) for r in rows]
    return {"trials": trials, "store_bytes": store,
            "rss_growth_each": grown_rss, "pss_growth_total": sum(grown_pss),
            "pss_file_growth_total": sum(file_pss),
            "copies_in_memory": sum(file_pss) / store,
            "copies_if_rss_were_private": sum(grown_rss) / store}


# ---- 3. checkpoint -------------------------------------------------------------------------------
def bench_checkpoint(every: int, epoch_seconds: float | None, repeats: int) -> dict[str, Any]:
    from dmlsearch.search.tune.checkpoints import Checkpointer
    from dmlsearch.trainables.data import ImageSet
    from dmlsearch.trainables.fit import Fitter

    torch.set_num_threads(2)
    data = ImageSet(images=torch.randint(0, 256, (20, 3, SIZE, SIZE), dtype=torch.uint8),
                    labels=np.arange(20) % 4, class_names=("a", "b", "c", "d"))
    cfg = TrialConfig.from_flat({"backbone": "resnet50", "embedding_size": 512,
                                 "loss": "multi_similarity", "batch_size": 20,
                                 "m_per_class": 5, "device": "cpu", "lr": 1e-4})
    fitter = Fitter(cfg, data, None, seed=0)
    started = time.perf_counter()
    steps = 2
    for _ in range(steps):
        fitter.train_step(data.images, torch.from_numpy(data.labels))
    images_per_s = steps * 20 / (time.perf_counter() - started)
    fitter.best_weights = {k: v.clone() for k, v in fitter.model.state_dict().items()}
    cub_epoch = 5_304  # CUB's 100 training classes less the 10% validation classes
    epoch = epoch_seconds or cub_epoch / images_per_s
    scratch = Path(tempfile.mkdtemp())
    old, new = [], []
    size = 0
    for r in range(repeats):
        began = time.perf_counter()  # before: save all, Ray copies it, after every epoch
        folder = Path(tempfile.mkdtemp(dir=scratch))
        torch.save(fitter.state_dict(), folder / "state.pt")
        size = (folder / "state.pt").stat().st_size
        shutil.copytree(folder, scratch / f"ray-{r}")
        old.append(time.perf_counter() - began)
        shutil.rmtree(folder)
        fitter.best_weights = None  # now: only learned-distance trials keep them
        saver = Checkpointer(every=1)
        began = time.perf_counter()
        saver.folder_for(1, False, fitter.state_dict)  # the snapshot; the save starts
        snapshot = time.perf_counter() - began
        saver._pending.wait()  # (in a trial the next epoch trains meanwhile)
        began = time.perf_counter()
        handed = saver.folder_for(2, False, lambda: {})  # next report: hand it to Ray ...
        shutil.copytree(handed, scratch / f"ray-new-{r}")  # ... which copies it
        new.append(snapshot + time.perf_counter() - began)
        saver.close()
        fitter.best_weights = {k: v.clone() for k, v in fitter.model.state_dict().items()}
    shutil.rmtree(scratch, ignore_errors=True)
    old_s, new_s = statistics.median(old), statistics.median(new)
    return {"state_bytes": size, "epoch_seconds": epoch,
            "epoch_seconds_source": "given" if epoch_seconds else
            f"this CPU: {images_per_s:.1f} img/s x {cub_epoch} images",
            "old_blocking_seconds_per_epoch": old_s, "new_blocking_seconds_per_checkpoint": new_s,
            "checkpoint_every": every,
            "old_share_of_epoch": old_s / epoch,
            "new_share_of_epoch": new_s / (every * epoch),
            "spread": {"old": [min(old), max(old)], "new": [min(new), max(new)]}}


# ---- 4. opens ------------------------------------------------------------------------------------
_IN_OPEN = 0x20


class OpenCounter:
    """Counts IN_OPEN events on every file under ``root`` (inotify; one watch per folder)."""

    def __init__(self, root: Path) -> None:
        self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.count = 0
        for folder in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
            if self.libc.inotify_add_watch(self.fd, str(folder).encode(), _IN_OPEN) < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set() or self._drain():
            if not self._drain():
                time.sleep(0.02)

    def _drain(self) -> bool:
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return False
        offset = 0
        while offset < len(data):
            _, mask, _, length = struct.unpack_from("iIII", data, offset)
            name = data[offset + 16: offset + 16 + length].rstrip(b"\0")
            if mask & _IN_OPEN and name.endswith(b".jpg"):
                self.count += 1
            offset += 16 + length
        return True

    def stop(self) -> int:
        time.sleep(0.2)
        self._stop.set()
        self._thread.join()
        os.close(self.fd)
        return self.count


def _search(root: Path, out: Path, cache: str) -> float:
    command = [sys.executable, "-m", "dmlsearch.search.cli", "run", "--space", "quickstart",
               "--dataset", "cub200", "--data-root", str(root), "--trials", "4",
               "--scheduler", "none", "--out", str(out), "--no-register", "--no-retrain",
               "--set", "backbone=smallcnn", "--set", "image_size=32", "--set", "epochs=2",
               "--set", "batch_size=32", "--set", "m_per_class=4", "--set", f"cache={cache}"]
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, text=True)
    return time.perf_counter() - started


def bench_opens(scratch: Path, images: int) -> dict[str, Any]:
    tree = scratch / "opens"
    write_cub_like(tree, classes=200, images=images, workers=os.cpu_count() or 1)
    rows = []
    for label, cache in (("cache=off", "off"), ("store, first search (builds it)", "auto"),
                         ("store, a later search", "auto")):
        counter = OpenCounter(tree / "CUB_200_2011" / "images")
        seconds = _search(tree, scratch / f"results-{len(rows)}", cache)
        rows.append({"search": label, "jpeg_opens": counter.stop(), "images": images,
                     "opens_per_image": counter.count / images, "seconds": seconds})
    return {"trials": 4, "epochs": 2, "rows": rows}


# ---- 5. crops: train_crops=original against resized -------------------------------------------
def _spread(values: list[float], per: int = 1) -> dict[str, float]:
    return {"median": statistics.median(values) / per, "min": min(values) / per,
            "max": max(values) / per}


def _build_rounds(root: Path, scratch: Path, rounds: int) -> dict[str, Any]:
    """Each store built from nothing, in fresh folders, alternately: seconds and bytes."""
    dataset = load_dataset("cub200", root=str(root), image_size=SIZE, train_crops="original")
    images, training = dataset.images, dataset.train().files
    runs: dict[str, list[float]] = {"resized": [], "original": []}
    sizes: dict[str, int] = {}
    for r in range(rounds):
        for name, files, short in (("resized", images.files, images.transform.resize),
                                   ("original", training, None)):
            folder = scratch / f"build-{name}-{r}"
            started = time.perf_counter()
            store, _ = open_store(images.root, files, archive=False, mode="RGB", short=short,
                                  dataset="cub200", cache=str(folder))
            runs[name].append(time.perf_counter() - started)
            sizes[name] = store.nbytes
            del store
            shutil.rmtree(folder, ignore_errors=True)
    from PIL import Image

    every = 0  # what a full-size store of every image (the design not taken) would hold
    for name in images.files:
        with Image.open(os.path.join(images.root, str(name))) as image:
            every += image.width * image.height * 3  # (a turn by EXIF keeps the product)
    return {"rounds": rounds, "seconds": {k: _spread(v) for k, v in runs.items()},
            "bytes": sizes, "images": {"resized": len(images.files),
                                       "original": len(training)},
            "bytes_full_size_every_image": every,
            "ratio_build_original_to_resized": (statistics.median(runs["original"])
                                                / statistics.median(runs["resized"])),
            "ratio_bytes_both_to_resized": (sizes["resized"] + sizes["original"])
            / sizes["resized"]}


def bench_crops(root: Path, scratch: Path, images: int, rounds: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    build = _build_rounds(root, scratch, rounds)
    sets = {crops: _train_images(root, "auto", crops) for crops in ("resized", "original")}
    subset = np.random.default_rng(0).permutation(len(sets["resized"]))[:images]
    batches = _batches(len(subset), subset)
    runs: dict[str, list[float]] = {f"{arm}_{crops}": [] for arm in ("off", "host", "cpu")
                                    for crops in sets}
    runs.update({"eval_store_cut": [], "eval_pil_from_full_size": []})
    for r in range(rounds):
        for crops, stored in sets.items():
            with BatchLoader(stored.without_store(), train=True, seed=r) as loader:
                started = time.process_time()
                for _ in loader.epoch(batches):
                    pass
                runs[f"off_{crops}"].append(time.process_time() - started)
            with BatchLoader(stored, train=True, seed=r, device="cpu") as loader:
                cutter = loader._store_loader
                rng = np.random.default_rng((r, 0))
                started = time.process_time()
                for index in batches:
                    cutter._free.put(cutter._cut(index, rng).buffer)
                runs[f"host_{crops}"].append(time.process_time() - started)
                started = time.process_time()
                for _ in loader.epoch(batches, index=r):
                    pass
                runs[f"cpu_{crops}"].append(time.process_time() - started)
        runs["eval_store_cut"].append(_eval_cut(sets["resized"], batches))
        runs["eval_pil_from_full_size"].append(_eval_pil(sets["original"], batches))
    per_image = {k: statistics.median(v) / len(subset) for k, v in runs.items()}
    epoch = len(sets["resized"])
    return {"build": build, "epoch_images": epoch, "measured_images": len(subset),
            "rounds": rounds,
            "cpu_ms_per_image": {k: _spread([x * 1e3 for x in v], len(subset))
                                 for k, v in runs.items()},
            "cpu_seconds_per_epoch": {k: v * epoch for k, v in per_image.items()},
            "ratio_original_to_resized": {
                arm: per_image[f"{arm}_original"] / per_image[f"{arm}_resized"]
                for arm in ("off", "host", "cpu")},
            "ratio_eval_pil_to_cut": (per_image["eval_pil_from_full_size"]
                                      / per_image["eval_store_cut"])}


def _eval_cut(stored: Any, batches: list[np.ndarray]) -> float:
    with BatchLoader(stored, train=False, device="cpu") as loader:
        started = time.process_time()
        for _ in loader.epoch(batches):
            pass
        return time.process_time() - started


def _eval_pil(stored: Any, batches: list[np.ndarray]) -> float:
    """Evaluation's input made from the full-size store with PIL (what storing only full-size
    images would cost at every evaluation): Resize(256) + CenterCrop(224) per image."""
    import torchvision.transforms.functional as F
    from PIL import Image

    store, rows, spec = stored.crop_store, stored.crop_rows, stored.transform
    started = time.process_time()
    for index in batches:
        np.stack([np.asarray(F.center_crop(F.resize(Image.fromarray(store.image(int(row))),
                                                    spec.resize), [SIZE, SIZE]))
                  for row in rows[index]])
    return time.process_time() - started


def bench_crops_gpu(root: Path, rounds: int, batch: int = 180) -> dict[str, Any]:
    device = torch.device("cuda")
    sets = {crops: _train_images(root, "auto", crops) for crops in ("resized", "original")}
    order = np.random.default_rng(0).permutation(len(sets["resized"]))
    batches = [order[i:i + batch] for i in range(0, len(order) - batch + 1, batch)]
    count = len(batches) * batch
    rates: dict[str, list[float]] = {f"{arm}_{crops}": [] for arm in ("gpu", "host")
                                     for crops in sets}
    for r in range(rounds + 1):  # round 0 warms the page cache and the kernels up
        for crops, stored in sets.items():
            with BatchLoader(stored, train=True, seed=r, device=device) as loader:
                torch.cuda.synchronize()
                started = time.perf_counter()
                for _ in loader.epoch(batches, index=r):
                    pass
                torch.cuda.synchronize()
                gpu = count / (time.perf_counter() - started)
                cutter, rng = loader._store_loader, np.random.default_rng((r, 1))
                started = time.perf_counter()
                for index in batches:
                    cutter._free.put(cutter._cut(index, rng).buffer)
                host = count / (time.perf_counter() - started)
            if r:
                rates[f"gpu_{crops}"].append(gpu)
                rates[f"host_{crops}"].append(host)
    return {"device": torch.cuda.get_device_name(), "images_per_epoch": count,
            "batch": batch, "rounds": rounds,
            "images_per_second": {k: _spread(v) for k, v in rates.items()},
            "ratio_original_to_resized": {
                arm: statistics.median(rates[f"{arm}_original"])
                / statistics.median(rates[f"{arm}_resized"]) for arm in ("gpu", "host")}}


# ---- main ----------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=11_788, help="the tree's JPEGs")
    parser.add_argument("--epoch-images", type=int, default=1_500,
                        help="training images per measured round of the epoch section")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--checkpoint-every", type=int,
                        default=TrialConfig.checkpoint_every)
    parser.add_argument("--epoch-seconds", type=float, default=None,
                        help="judge checkpoints against this epoch time (e.g. a GPU's)")
    parser.add_argument("--opens-images", type=int, default=2_400)
    parser.add_argument("--sections", nargs="+", default=["epoch", "memory", "checkpoint",
                                                          "opens", "crops"])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    if args.small:
        args.images, args.epoch_images, args.rounds = 800, 200, 2
        args.opens_images = 400
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="dmlsearch-store-bench-"))
    os.environ["DMLSEARCH_CACHE"] = str(scratch / "cache")
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(),
                                           "cpu": _cpu_model(), "torch": torch.__version__}}
    if {"epoch", "memory", "crops", "crops_gpu"} & set(args.sections):
        started = time.perf_counter()
        if not (scratch / "CUB_200_2011").exists():
            write_cub_like(scratch, images=args.images, workers=os.cpu_count() or 1)
        results["tree_seconds"] = time.perf_counter() - started
        started = time.perf_counter()
        _train_images(scratch, "auto")
        results["store_build_seconds"] = time.perf_counter() - started
    sections = {
        "epoch": lambda: bench_epoch(scratch, args.epoch_images, args.rounds),
        "memory": lambda: bench_memory(scratch, args.trials),
        "checkpoint": lambda: bench_checkpoint(args.checkpoint_every, args.epoch_seconds,
                                               args.rounds),
        "opens": lambda: bench_opens(scratch, args.opens_images),
        "crops": lambda: bench_crops(scratch, scratch, args.epoch_images, args.rounds),
        "crops_gpu": lambda: bench_crops_gpu(scratch, args.rounds),
    }
    for name in args.sections:
        results[name] = sections[name]()
        print(f"== {name}\n{json.dumps(results[name], indent=1)}", flush=True)
        if args.out:
            args.out.write_text(json.dumps(results, indent=2))
    if args.dir is None:
        shutil.rmtree(scratch, ignore_errors=True)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
