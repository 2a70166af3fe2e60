"""Benchmark: a trial's GPU path on the real workload (CUB-sized JPEGs at 224 px).

Every figure is a ratio to a baseline measured in the same run. The data is a CUB-200-2011-shaped
tree written at the start (:mod:`dmlsearch.trainables.data.cub_like`: 200 classes, 11,788 JPEGs of
about 500 x 375), so nothing is downloaded. Trials run in processes of their own, each pinned to
its CPU cores (``os.sched_setaffinity``), as Ray's ``--cpus-per-trial`` intends.

Sections (``--sections``):

1. **train**: ``Fitter.train_step`` of ResNet50 at 224, batch 100 (MultiSimilarity + miner,
   AdamW) on a decoded batch in pinned memory: fp32 and bf16 + channels-last (the new default on
   a GPU); the model's ceiling.
2. **compile**: the same step with ``torch.compile``: compile seconds, steady images/s against
   eager, and the epochs a CUB trial needs before compiling pays.
3. **feed**: the training loop (``Fitter.train_epoch``, second epoch) on CUB's training classes,
   ResNet50 bf16 + channels-last, the process on 2 CPU cores: fed from the decoded store with
   augmentation on the GPU; from decoded images held in memory (the in-memory step rate: the
   ceiling); and, for reference, decoding the JPEGs (``cache=off``, 1 worker). Also the two
   device resamplers (``roi_align`` for the batch, ``interpolate`` per crop) on one batch.
4. **trial**: a whole trial (``Fitter.run``: train, validation every epoch, checkpoints) of
   ResNet50 on CUB: the share of its wall time in train steps, evaluation and checkpoints, with
   the default checkpoint cadence (in the background, every ``checkpoint_every`` epochs) and the
   old one (a synchronous save of everything after every epoch), each checkpoint also copied once
   more as Ray copies it into its storage.
5. **pack**: the thesis's search setting (BNInception-512, batch 180, MultiSimilarity), 1 and 4
   trials sharing the GPU (store-fed, 2 cores each): total images/s, GPU memory per trial, and
   the resident memory of the processes (one copy of the store).
6. **search**: trials per hour of a CUB-sized search on one GPU, today's defaults against the new
   ones (same space and epochs; 100-epoch trials extrapolated from steady epochs): today = JPEGs
   decoded in the trial's process, fp32, NCHW, a synchronous checkpoint every epoch, one CPU per
   trial; new = the decoded store, device augmentation, bf16 + channels-last, checkpoints every
   ``checkpoint_every`` epochs in the background, two CPUs per trial. Both at 1 and 4 trials per GPU.
7. **eval**: retrieval metrics of an SOP-sized set (60,502 x 512) on the GPU (the torch
   searcher) against faiss on the CPU: seconds, and equal metrics.
8. **recipe**: what the authors' recipe costs a step (issue #32): ResNet50 (batch 100) and
   BNInception-512 (batch 180), ProxyAnchor, bf16 + channels-last, a "pretrained" trunk (its own
   initial weights saved to a file, so ``freeze_bn`` and ``head_warmup_epochs`` act: they do
   nothing for ``pretrained=none``): ``freeze_bn=stats`` + ``head_warmup_epochs=1`` against
   ``freeze_bn=off`` + no warm-up, two fitters in one process, their blocks of steps
   (``Fitter.train_epoch`` on fixed decoded batches) alternating; images/s of the warm-up epoch
   (epoch 1: only the embedding layer and the proxies train) and of a normal epoch (epoch 2),
   medians over the rounds and the per-round ratios' median and range.

``--sections data`` only writes the CUB-like tree and its store into ``--scratch``; a later run
with ``--keep-data`` and the same ``--scratch`` uses them (``benchmarks/device/recipes.sh``:
the data is written while another part runs).

    python benchmarks/gpu.py --out gpu.json [--sections ...] [--scratch DIR]
    python benchmarks/gpu.py --rehearse      # every section at toy size, on the CPU: a check

About 9 minutes on one H100 with 16 cores (8 before the recipe section). Without a GPU (and
without ``--rehearse``) it says so and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from dmlsearch.trainables.config import TrialConfig  # noqa: E402
from dmlsearch.trainables.data import ImageSet  # noqa: E402
from dmlsearch.trainables.fit import Fitter  # noqa: E402

SECTIONS = ["train", "compile", "feed", "trial", "pack", "search", "eval", "recipe", "data"]
# The sections that need the CUB-like tree; "data" only writes it and its store (into --scratch,
# for later runs with --keep-data).
DATA_SECTIONS = {"feed", "trial", "pack", "search", "data"}
OVERRIDES: dict[str, Any] = {}  # --rehearse: sizes a toy set can serve; the data's root
EPOCHS_PER_TRIAL = 100  # the thesis's trials (ch. 3.4)
DEVICE = "cuda"
SIZE = 224


# ---- configurations ----------------------------------------------------------------------------
def _resnet(**changes: Any) -> TrialConfig:
    base = {"dataset": "cub200", "backbone": "resnet50", "embedding_size": 512,
            "loss": "multi_similarity", "batch_size": 100, "m_per_class": 5, "lr": 1e-4,
            "device": DEVICE, "epochs": 100, "workers": 0, "val_ratio": 0.1,
            "pooling": "gap+gmp", "grad_clip": 10.0, "image_size": SIZE}
    base.update(changes)
    base.update(OVERRIDES)
    return TrialConfig.from_flat(base)


def _thesis_search(**changes: Any) -> TrialConfig:
    """spaces/files/thesis_search_multi_similarity.yaml's base (no ImageNet weights here)."""
    return _resnet(backbone="bninception", batch_size=180, **changes)


TODAY = {"precision": "fp32", "channels_last": False, "cache": "off", "workers": 0}
NEW: dict[str, Any] = {}  # the defaults


def _random_set(count: int, size: int, classes: int, seed: int = 0) -> ImageSet:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (count, 3, size, size), dtype=torch.uint8, generator=g)
    return ImageSet(images=images, labels=np.arange(count) % classes,
                    class_names=tuple(str(c) for c in range(classes)))


# ---- data ----------------------------------------------------------------------------------------
def make_data(scratch: Path, classes: int, images: int, keep: bool = False) -> dict[str, Any]:
    """The CUB-like tree and its decoded store (built here, once, as the driver would).
    ``keep``: a tree already in ``scratch`` (an earlier run's, same sizes) is used as it is, and
    its store too (content-keyed: found again, not rebuilt)."""
    from dmlsearch.trainables.data import attach_store
    from dmlsearch.trainables.data import load_dataset
    from dmlsearch.trainables.data.cub_like import write_cub_like

    started = time.perf_counter()
    if not (keep and (scratch / "CUB_200_2011" / "classes.txt").is_file()):
        write_cub_like(scratch, classes=classes, images=images, workers=os.cpu_count() or 1)
    written = time.perf_counter() - started
    os.environ["DMLSEARCH_CACHE"] = str(scratch / "cache")
    dataset = load_dataset("cub200", root=str(scratch), image_size=SIZE)
    started = time.perf_counter()
    dataset, stats = attach_store(dataset, cache="auto")
    return {"root": str(scratch), "images": images, "classes": classes,
            "jpeg_bytes": sum(f.stat().st_size for f in scratch.rglob("*.jpg")),
            "write_seconds": written, "store_build_seconds": time.perf_counter() - started,
            "store_bytes": stats.bytes, "build_processes": os.cpu_count()}


def _pin(cores: list[int]) -> None:
    if cores:
        os.sched_setaffinity(0, cores)
        torch.set_num_threads(len(cores))


def _split(cfg: TrialConfig) -> tuple[Any, Any]:
    from dmlsearch.trainables.trial import load_for
    from dmlsearch.trainables.trial import splits_for

    dataset = load_for(cfg)
    split = splits_for(cfg, dataset)[0]
    return (dataset.images.select_classes(split.train_classes),
            dataset.images.select_classes(split.val_classes))


# ---- 1. train ----------------------------------------------------------------------------------
def _timed_steps(fitter: Fitter, batch: tuple[torch.Tensor, torch.Tensor], steps: int,
                 warmup: int = 5) -> tuple[float, float]:
    images, labels = batch
    fitter.begin_epoch()
    started = time.perf_counter()
    for _ in range(warmup):
        fitter.train_step(images, labels)
    _sync()
    warm = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(steps):
        fitter.train_step(images, labels)
    _sync()
    return steps * images.shape[0] / (time.perf_counter() - started), warm


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def bench_train(steps: int, batch_size: int) -> list[dict[str, Any]]:
    data = _random_set(batch_size, SIZE, batch_size // 5)
    batch = (data.images.pin_memory() if torch.cuda.is_available() else data.images,
             torch.from_numpy(data.labels))
    rows = []
    for label, changes in (("fp32", {"precision": "fp32", "channels_last": False}),
                           ("bf16+cl (auto)", {})):
        fitter = Fitter(_resnet(batch_size=batch_size, **changes), data, None, seed=0)
        rate, _ = _timed_steps(fitter, batch, steps)
        rows.append({"mode": label, "images_per_s": rate, "peak_memory_gib": _peak()})
        fitter.close()
        del fitter
        _reset_memory()
    for row in rows:
        row["ratio_to_fp32"] = row["images_per_s"] / rows[0]["images_per_s"]
    return rows


def _peak() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0


def _reset_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


# ---- 2. compile ----------------------------------------------------------------------------------
def bench_compile(steps: int, batch_size: int, epoch_images: int) -> dict[str, Any]:
    data = _random_set(batch_size, SIZE, batch_size // 5)
    batch = (data.images.pin_memory() if torch.cuda.is_available() else data.images,
             torch.from_numpy(data.labels))
    eager = Fitter(_resnet(batch_size=batch_size), data, None, seed=0)
    eager_rate, _ = _timed_steps(eager, batch, steps)
    eager.close()
    del eager
    _reset_memory()
    compiled = Fitter(_resnet(batch_size=batch_size, compile=True), data, None, seed=0)
    rate, warm = _timed_steps(compiled, batch, steps, warmup=3)
    compiled.close()
    saved_per_epoch = epoch_images / eager_rate - epoch_images / rate
    return {"eager_images_per_s": eager_rate, "compiled_images_per_s": rate,
            "speedup": rate / eager_rate, "compile_and_3_steps_seconds": warm,
            "epoch_images": epoch_images,
            "seconds_saved_per_epoch": saved_per_epoch,
            "break_even_epochs": (warm / saved_per_epoch) if saved_per_epoch > 0 else None}


# ---- 3. feed -----------------------------------------------------------------------------------
def _feed_worker(kind: str, cfg_flat: dict[str, Any], cores: list[int], out: Any) -> None:
    try:
        _pin(cores)
        cfg = TrialConfig.from_flat(cfg_flat)
        train, _ = _split(cfg)
        if kind == "memory":  # the same training images, decoded and cropped, in memory
            from dmlsearch.trainables.data import BatchLoader
            from dmlsearch.trainables.data import sequential_batches

            with BatchLoader(train, train=False, device="cpu") as loader:
                pixels = torch.cat([x for x, _ in loader.epoch(
                    sequential_batches(len(train), 256))])
            train = ImageSet(images=pixels, labels=train.labels, class_names=train.class_names)
        fitter = Fitter(cfg, train, None, seed=0)
        fitter.train_epoch()
        _sync()
        with _Utilisation() as util:
            started = time.perf_counter()
            fitter.train_epoch()
            _sync()
            seconds = time.perf_counter() - started
        out.put({"images": len(train), "seconds": seconds, "images_per_s": len(train) / seconds,
                 "data_wait_seconds": fitter.data_wait_seconds,
                 "gpu_utilisation_mean_pct": util.mean})
        fitter.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        out.put({"error": repr(exc)})


def _in_process(target: Any, *args: Any) -> Any:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, out))
    proc.start()
    result = out.get(timeout=900)
    proc.join()
    return result


def bench_feed(cores: list[int]) -> dict[str, Any]:
    rows = {}
    for kind, label, changes in (
            ("memory", "decoded, in memory (the ceiling)", {}),
            ("store", "decoded store, augmented on the GPU", {}),
            ("jpeg", "JPEGs decoded every epoch (cache=off, 1 worker)",
             {"cache": "off", "workers": 1})):
        row = _in_process(_feed_worker, kind, _resnet(**changes).to_flat(), cores)
        row["source"] = label
        rows[kind] = row
    for row in rows.values():
        if "images_per_s" in row:
            row["ratio_to_in_memory"] = row["images_per_s"] / rows["memory"]["images_per_s"]
    try:
        resample: Any = _resamplers()
    except Exception as exc:  # noqa: BLE001 - the feed rows stand on their own
        resample = {"error": repr(exc)}
    return {"cores": len(cores), "rows": list(rows.values()), "resample": resample}


def _resamplers(batch: int = 180, repeats: int = 20) -> list[dict[str, Any]]:
    from dmlsearch.trainables.data import _augment as aug

    rng = np.random.default_rng(0)
    heights, widths = rng.integers(256, 342, batch), np.full(batch, 256)
    widths, heights = np.where(rng.random(batch) < 0.75, (heights, widths), (widths, heights))
    sources = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in zip(heights, widths)]
    boxes = aug.rrc_boxes(heights, widths, rng)
    h, w = aug.padded_shape(boxes, exact=False)
    host = np.zeros((batch, h, w, 3), dtype=np.uint8)
    started = time.perf_counter()
    aug.cut_crops(sources, boxes, host, exact=False)
    cut_ms = (time.perf_counter() - started) * 1e3
    device = torch.device(DEVICE if torch.cuda.is_available() else "cpu")
    crops = torch.from_numpy(host).to(device)
    flips = torch.from_numpy(rng.random(batch) < 0.5).to(device)
    rows = []
    for method in ("roi_align", "interpolate"):
        aug.resize_crops(crops, boxes[:, 2:], SIZE, flips, method=method)
        _sync()
        started = time.perf_counter()
        for _ in range(repeats):
            aug.resize_crops(crops, boxes[:, 2:], SIZE, flips, method=method)
        host_ms = (time.perf_counter() - started) / repeats * 1e3
        _sync()
        total_ms = (time.perf_counter() - started) / repeats * 1e3
        rows.append({"method": method, "batch": batch, "host_ms_per_batch": host_ms,
                     "device_ms_per_batch": total_ms, "cut_ms_per_batch_host": cut_ms})
    return rows


class _Utilisation:
    """Samples the GPU's utilisation (NVML) in a thread while the ``with`` block runs."""

    def __init__(self, period: float = 0.05) -> None:
        self.period, self.samples = period, []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Utilisation:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - no NVML (a CPU rehearsal): no samples
            return self

        def sample() -> None:
            while not self._stop.is_set():
                self.samples.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                time.sleep(self.period)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def mean(self) -> float:
        return float(statistics.mean(self.samples)) if self.samples else float("nan")


# ---- 4./6. whole trials with checkpoints ----------------------------------------------------------
class _OldCheckpoints:
    """The cadence before: the whole state (best weights too) saved after every epoch."""

    def __init__(self, storage: Path) -> None:
        self.storage = storage

    def folder_for(self, iteration: int, last: bool, state: Any) -> Path | None:
        folder = Path(tempfile.mkdtemp(prefix="old-checkpoint-"))
        torch.save(state(), folder / "trial_state.pt")
        return folder

    def close(self) -> None:
        pass


def _trial_worker(cfg_flat: dict[str, Any], cores: list[int], epochs: int, policy: str,
                  scratch: str, start: Any, out: Any) -> None:
    try:
        from dmlsearch.search.tune.checkpoints import Checkpointer

        _pin(cores)
        cfg = TrialConfig.from_flat(cfg_flat)
        train, val = _split(cfg)
        storage = Path(tempfile.mkdtemp(dir=scratch, prefix="ray-storage-"))
        saver: Any = (Checkpointer(every=cfg.checkpoint_every) if policy == "new"
                      else _OldCheckpoints(storage))
        fitter = Fitter(cfg.replace(epochs=epochs), train, val, seed=0,
                        keep_best=policy == "old")
        rows: list[dict[str, float]] = []
        marks = {"epoch_start": time.perf_counter()}

        def on_epoch(report: Any, state: Any) -> None:
            began = time.perf_counter()
            folder = saver.folder_for(report.epoch, report.last, state)
            if folder is not None:  # what Ray's report does with it: a copy into storage
                target = storage / f"checkpoint_{report.epoch:06d}"
                shutil.copytree(folder, target)
                shutil.rmtree(folder, ignore_errors=True)
                for old in storage.glob("checkpoint_*"):  # num_to_keep=1
                    if old != target:
                        shutil.rmtree(old, ignore_errors=True)
            now = time.perf_counter()
            rows.append({"epoch": report.epoch, "wall": now - marks["epoch_start"],
                         "train": fitter.train_seconds,
                         "train_steps": fitter.train_seconds - fitter.data_wait_seconds,
                         "eval": report.seconds - fitter.train_seconds,
                         "checkpoint": now - began})
            marks["epoch_start"] = now

        if start is not None:
            start.wait()
        began = time.perf_counter()
        fitter.run(on_epoch)
        wall = time.perf_counter() - began
        saver.close()
        out.put({"rows": rows, "wall": wall, "train_images": len(train),
                 "val_images": len(val), "peak_memory_gib": _peak(),
                 "memory": _smaps()})
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        out.put({"error": repr(exc)})


def _smaps() -> dict[str, int]:
    """Resident and proportional memory of this process (kB), /proc/self/smaps_rollup."""
    try:
        lines = Path("/proc/self/smaps_rollup").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        if key in ("Rss", "Pss", "Pss_File", "Shared_Clean", "Private_Clean", "Private_Dirty"):
            out[key] = int(value.split()[0])
    return out


def _trials(cfg: TrialConfig, n: int, cores_each: int, epochs: int, policy: str,
            scratch: Path) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(n), ctx.Queue()
    cpus = sorted(os.sched_getaffinity(0))
    procs = [ctx.Process(target=_trial_worker, args=(
        cfg.to_flat(), cpus[i * cores_each:(i + 1) * cores_each], epochs, policy, str(scratch),
        start, out)) for i in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=1200) for _ in range(n)]
    for p in procs:
        p.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"a trial process failed: {errors[0]}")
    return results


def _shares(result: dict[str, Any], skip_first: bool = True) -> dict[str, float]:
    rows = result["rows"][1:] if skip_first and len(result["rows"]) > 1 else result["rows"]
    wall = sum(r["wall"] for r in rows)
    return {"epochs": len(rows), "wall_seconds": wall,
            "train_steps_share": sum(r["train_steps"] for r in rows) / wall,
            "data_wait_share": sum(r["train"] - r["train_steps"] for r in rows) / wall,
            "eval_share": sum(r["eval"] for r in rows) / wall,
            "checkpoint_share": sum(r["checkpoint"] for r in rows) / wall,
            "epoch_seconds": wall / len(rows)}


def bench_trial(epochs: int, scratch: Path, cores: int) -> dict[str, Any]:
    out = {}
    for policy, changes in (("new", {}), ("old", {})):
        result = _trials(_resnet(**changes), 1, cores, epochs, policy, scratch)[0]
        out[policy] = {**_shares(result), "peak_memory_gib": result["peak_memory_gib"],
                       "train_images": result["train_images"],
                       "val_images": result["val_images"], "per_epoch": result["rows"]}
    return out


# ---- 5. pack -----------------------------------------------------------------------------------
def bench_pack(counts: list[int], epochs: int, scratch: Path, cores: int,
               store_bytes: int) -> list[dict[str, Any]]:
    rows = []
    for n in counts:
        results = _trials(_thesis_search(), n, cores, epochs, "new", scratch)
        images = sum(r["train_images"] * (len(r["rows"]) - 1) for r in results)
        train_seconds = max(sum(row["wall"] for row in r["rows"][1:]) for r in results)
        pss = [r["memory"].get("Pss", 0) * 1024 for r in results]
        rss = [r["memory"].get("Rss", 0) * 1024 for r in results]
        rows.append({"trials": n, "total_images_per_s": images / train_seconds,
                     "peak_memory_gib_per_trial": max(r["peak_memory_gib"] for r in results),
                     "rss_bytes_each": rss, "pss_bytes_total": sum(pss),
                     "store_bytes": store_bytes,
                     "epoch_seconds": [_shares(r)["epoch_seconds"] for r in results]})
    for row in rows:
        row["ratio_to_one_trial"] = row["total_images_per_s"] / rows[0]["total_images_per_s"]
    return rows


# ---- 6. search ---------------------------------------------------------------------------------
def bench_search(concurrency: list[int], epochs: int, scratch: Path) -> list[dict[str, Any]]:
    rows = []
    for label, changes, policy, cores in (("today", TODAY, "old", 1), ("new", NEW, "new", 2)):
        for n in concurrency:
            results = _trials(_thesis_search(**changes), n, cores, epochs, policy, scratch)
            epoch = statistics.mean(_shares(r)["epoch_seconds"] for r in results)
            rows.append({"setting": label, "trials_per_gpu": n, "cpus_per_trial": cores,
                         "steady_epoch_seconds": epoch,
                         "trials_per_hour": n * 3600 / (EPOCHS_PER_TRIAL * epoch),
                         "shares": [_shares(r) for r in results]})
    base = next(r for r in rows if r["setting"] == "today" and r["trials_per_gpu"] == 1)
    for row in rows:
        row["ratio_to_today_one_per_gpu"] = row["trials_per_hour"] / base["trials_per_hour"]
    return rows


# ---- 7. eval -----------------------------------------------------------------------------------
def bench_eval(n: int, d: int, classes: int) -> dict[str, Any]:
    from dmlsearch.trainables.metrics.retrieval import retrieval_metrics

    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, n)
    centres = rng.standard_normal((classes, d)).astype(np.float32)
    x = centres[labels] + 3.0 * rng.standard_normal((n, d)).astype(np.float32)
    ks = (1, 10, 100, 1000)
    device = torch.device(DEVICE) if torch.cuda.is_available() else None
    on_device = torch.from_numpy(x).to(device or "cpu")
    timings = []
    for _ in range(3):
        _sync()
        started = time.perf_counter()
        gpu = retrieval_metrics(on_device, labels, ks=ks, device=device,
                                backend=None if device is not None else "torch")
        timings.append(time.perf_counter() - started)
    started = time.perf_counter()
    cpu = retrieval_metrics(x, labels, ks=ks, device="cpu")
    cpu_seconds = time.perf_counter() - started
    return {"n": n, "d": d, "classes": classes, "gpu_seconds": timings,
            "faiss_cpu_seconds": cpu_seconds, "equal": gpu == cpu,
            "max_abs_diff": max(abs(gpu[k] - cpu[k]) for k in cpu), "metrics": gpu}


# ---- 8. recipe ----------------------------------------------------------------------------------
def _saved_trunk(cfg: TrialConfig, scratch: Path) -> str:
    """A weights file of ``cfg``'s trunk as initialised: a stand-in for ImageNet weights (none
    can be downloaded here) that makes the trunk count as pretrained."""
    from dmlsearch.trainables.models import build_model

    path = scratch / f"{cfg.backbone}-{cfg.embedding_size}-trunk.pt"
    if not path.is_file():
        torch.manual_seed(0)
        model = build_model(backbone=cfg.backbone, in_channels=3,
                            embedding_size=cfg.embedding_size, pooling=cfg.pooling)
        torch.save(model.trunk.state_dict(), path)
    return str(path)


def _trunk_state(fitter: Fitter) -> dict[str, Any]:
    """What the recipe did to the trunk this epoch: trainable tensors, BatchNorm in train mode."""
    from torch import nn

    trunk = fitter.model.trunk
    norms = [m for m in trunk.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    return {"trunk_trainable_tensors": sum(p.requires_grad for p in trunk.parameters()),
            "trunk_tensors": sum(1 for _ in trunk.parameters()),
            "trainable_parameters": sum(p.numel() for p in fitter.model.parameters()
                                        if p.requires_grad),
            "batchnorms_in_train_mode": sum(m.training for m in norms),
            "batchnorms": len(norms)}


def _recipe_model(label: str, cfg_of: Any, batch_size: int, steps: int, rounds: int,
                  scratch: Path) -> dict[str, Any]:
    common = {"batch_size": batch_size, "loss": "proxy_anchor", "epochs": 10}
    weights = _saved_trunk(cfg_of(**common), scratch)
    arms = {"recipe": cfg_of(pretrained=weights, freeze_bn="stats", head_warmup_epochs=1,
                             **common),
            "before": cfg_of(pretrained=weights, freeze_bn="off", head_warmup_epochs=0,
                             **common)}
    cfg = arms["recipe"]
    data = _random_set(batch_size, cfg.image_size or SIZE, batch_size // cfg.m_per_class)
    pinned = data.images.pin_memory() if torch.cuda.is_available() else data.images
    batch = (pinned, torch.from_numpy(data.labels))
    fitters = {name: Fitter(c, data, None, seed=0) for name, c in arms.items()}
    resolved = {"precision": fitters["recipe"].precision,
                "channels_last": fitters["recipe"].channels_last}
    phases = []
    for phase in ("warm-up epoch (epoch 1)", "normal epoch (epoch 2)"):
        for fitter in fitters.values():  # cuDNN's autotuning for this epoch's mode; allocator
            fitter.train_epoch([batch] * 3)
        _sync()
        rates: dict[str, list[float]] = {name: [] for name in fitters}
        for r in range(rounds):  # alternate, and alternate which goes first
            order = list(fitters) if r % 2 == 0 else list(fitters)[::-1]
            for name in order:
                started = time.perf_counter()
                fitters[name].train_epoch([batch] * steps)
                _sync()
                rates[name].append(steps * batch_size / (time.perf_counter() - started))
        ratios = [a / b for a, b in zip(rates["recipe"], rates["before"])]
        phases.append({
            "phase": phase, "epoch": fitters["recipe"].epoch + 1,
            **{f"{name}_images_per_s": rates[name] for name in fitters},
            **{f"{name}_median": statistics.median(rates[name]) for name in fitters},
            "ratio_recipe_to_before_median": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)],
            **{f"{name}_trunk": _trunk_state(fitters[name]) for name in fitters}})
        for fitter in fitters.values():
            fitter.finish_epoch()
    peak = _peak()
    for fitter in fitters.values():
        fitter.close()
    del fitters
    _reset_memory()
    return {"model": label, "backbone": cfg.backbone, "batch_size": batch_size,
            "loss": cfg.loss, **resolved, "steps_per_block": steps,
            "rounds": rounds, "peak_memory_gib_both_fitters": peak, "phases": phases}


def bench_recipe(steps: int, rounds: int, scratch: Path,
                 done: Any = None) -> list[dict[str, Any]]:
    """Both models; ``done(rows)`` after each (the rows so far are saved at once)."""
    big = DEVICE == "cuda"
    models = [("ResNet50-512", _resnet, 100 if big else 10),
              ("BNInception-512 (thesis search)",
               lambda **changes: _resnet(backbone="bninception", **changes), 180 if big else 10)]
    rows: list[dict[str, Any]] = []
    for label, cfg_of, batch_size in models:
        rows.append(_recipe_model(label, cfg_of, batch_size, steps, rounds, scratch))
        if done is not None:
            done(rows)
    return rows


# ---- main ----------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    }
    try:
        info["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["driver"] = "unknown (nvidia-smi failed)"
    return info


def _print(name: str, value: Any) -> None:
    print(f"\n== {name}\n{json.dumps(value, indent=1, default=str)[:4000]}", flush=True)


def main() -> None:
    global DEVICE, SIZE, OVERRIDES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", default=SECTIONS[:-1], choices=SECTIONS)
    parser.add_argument("--scratch", type=Path, default=None,
                        help="where the CUB-like tree and its store go (default: a temp folder)")
    parser.add_argument("--images", type=int, default=11_788)
    parser.add_argument("--classes", type=int, default=200)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=6, help="epochs of the trial section")
    parser.add_argument("--search-epochs", type=int, default=3)
    parser.add_argument("--pack", type=int, nargs="+", default=None,
                        help="trials per GPU of the pack and search sections (default 1 4; "
                             "--rehearse: 1 2)")
    parser.add_argument("--recipe-steps", type=int, default=20,
                        help="steps per timed block of the recipe section")
    parser.add_argument("--recipe-rounds", type=int, default=5,
                        help="timed blocks per arm and epoch of the recipe section")
    parser.add_argument("--keep-data", action="store_true",
                        help="use the CUB-like tree an earlier run left in --scratch (same sizes)")
    parser.add_argument("--rehearse", action="store_true",
                        help="every section at toy size on the CPU (checks the code paths)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()
    if args.rehearse:
        DEVICE, SIZE = "cpu", 64
        OVERRIDES = {"batch_size": 10, "device": "cpu", "val_ratio": 0.3, "backbone": "smallcnn"}
        args.images, args.classes, args.steps = 240, 20, 2
        args.epochs, args.search_epochs = 2, 2
        args.pack = args.pack or [1, 2]
        args.recipe_steps, args.recipe_rounds = 2, 2
    elif not torch.cuda.is_available():
        print("benchmarks/gpu.py: no GPU is visible to torch; run it on a machine with one "
              "(or --rehearse on a CPU)", file=sys.stderr)
        raise SystemExit(2)
    args.pack = args.pack or [1, 4]
    if DEVICE == "cuda":
        torch.backends.cudnn.benchmark = True
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="dmlsearch-gpu-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": machine(), "args": {
        k: str(v) for k, v in vars(args).items()}}
    _print("machine", results["machine"])

    def save() -> None:
        if args.out:
            args.out.write_text(json.dumps(results, indent=2, default=str))

    data: dict[str, Any] = {}
    if DATA_SECTIONS & set(args.sections):
        data = make_data(scratch, args.classes, args.images, keep=args.keep_data)
        OVERRIDES["data_root"] = str(scratch)
        results["data"] = data
        _print("data", data)
    cores = 2
    steps_batch = 100 if DEVICE == "cuda" else 10
    runs = {
        "train": lambda: bench_train(args.steps, steps_batch),
        "compile": lambda: bench_compile(args.steps, steps_batch,
                                         epoch_images=int(args.images / 2 * 0.9)),
        "feed": lambda: bench_feed(sorted(os.sched_getaffinity(0))[:cores]),
        "trial": lambda: bench_trial(args.epochs, scratch, cores),
        "pack": lambda: bench_pack(args.pack, args.search_epochs, scratch, cores,
                                   data["store_bytes"]),
        "search": lambda: bench_search(args.pack, args.search_epochs, scratch),
        "eval": lambda: bench_eval(60_502, 512, 11_316) if DEVICE == "cuda"
        else bench_eval(2_000, 64, 300),
        "recipe": lambda: bench_recipe(args.recipe_steps, args.recipe_rounds, scratch,
                                       done=lambda rows: (results.update(recipe=rows), save())),
        "data": lambda: data,
    }
    for name in args.sections:
        started = time.perf_counter()
        try:
            results[name] = runs[name]()
        except Exception as exc:  # noqa: BLE001 - one section failing keeps the others
            results[name] = {"error": repr(exc)}
        results.setdefault("seconds", {})[name] = time.perf_counter() - started
        _print(name, results[name])
        save()
    if args.scratch is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
