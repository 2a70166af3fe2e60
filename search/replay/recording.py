"""Recording a table (``dmlsearch record-curves``, ``benchmarks/learning_curves.py``): every point
of a grid space trained for real, in worker processes, each training appended to the table as it
finishes (:mod:`.table`), so a recording resumes where it stopped.

Torch is imported by the workers (:mod:`.curve`) and by :func:`check_recordable`, never when
this module is imported: the driver of a replayed search reads tables without it.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import random
import time
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmlsearch.search.provenance import code_revision
from dmlsearch.search.provenance import training_code
from dmlsearch.search.replay.table import config_key
from dmlsearch.search.replay.table import header_line
from dmlsearch.search.replay.table import read_lines
from dmlsearch.search.replay.table import run_line
from dmlsearch.spaces import Space
from dmlsearch.spaces import config_from_sample
from dmlsearch.trainables.errors import UserError

__all__ = ["check_recordable", "record_table"]


def check_recordable(space: Space) -> None:
    """Before any worker starts: the base configuration's data loads and splits (the checks a
    search's preflight runs)."""
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.trial import load_for  # torch
    from dmlsearch.trainables.trial import preflight

    cfg = TrialConfig.from_flat(space.default_config())
    preflight(cfg, load_for(cfg))


def record_table(space: Space, out: Path, *, overrides: Mapping[str, Any], workers: int,
                 second_seed: int, command: str, limit: int | None = None,
                 sample: int | None = None, repeat_seeds: int | None = None,
                 allow_code_change: bool = False, echo: Callable[[str], None] = print) -> int:
    """Train every grid point of ``space`` (with ``overrides``) with seed 0, and
    ``second_seed`` of them (a seeded random subset) again with seed 1, ``workers`` at a time,
    one CPU thread each (GPU if visible); append each to ``out``. ``limit``: a seeded random
    sample of that many grid points instead of every one (a smoke test). ``sample``: instead
    of the grid, the space's warm starts and ``sample`` configurations spread over it (a space
    with continuous ranges; :func:`design_jobs`). ``repeat_seeds``: instead of the design, the
    configurations ``out`` already holds with two or more seeds, each trained again until it
    has seeds 0 to ``repeat_seeds`` - 1 (:func:`repeat_jobs`). Resumes: trainings already in
    ``out`` are skipped, and a table whose training code differs from this one's is refused
    unless ``allow_code_change`` (:func:`same_training`); each line records the code that
    trained it. Returns the number trained now."""
    if space.params == ():
        raise UserError(f"space {space.name!r} searches nothing: a table needs a grid")
    base = {**space.base, **overrides}
    if "data_root" in base and base["data_root"]:
        base["data_root"] = str(Path(str(base["data_root"])).expanduser().resolve())
    header, runs = read_lines(out)
    if header is not None and header.get("space_name") != space.name:
        raise UserError(f"{out} is a table of space {header.get('space_name')!r}, got --space "
                        f"{space.name!r}; give the table's own space, or another --out")
    if header is not None:
        same_training(out, header, allow_code_change=allow_code_change, echo=echo)
    if repeat_seeds is None:
        jobs = design_jobs(space, sample=sample, second_seed=second_seed, limit=limit)
    elif header is None:
        raise UserError(f"--repeat-seeds adds seeds to an existing table, but {out} holds none; "
                        f"record the table first (with --second-seed N)")
    else:
        jobs = repeat_jobs(out, runs, repeat_seeds)
    done = {(r["key"], r["seed"]) for r in runs}
    todo = [(c, s) for c, s in jobs if (config_key(c), s) not in done]
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as handle:  # append-only: a line cut by a crash is skipped on read
        if header is None:
            design = {"kind": "grid"} if sample is None else {
                "kind": "sobol", "count": sample, "seed": 0, "warm_starts": True}
            handle.write(json.dumps(header_line(space, base, command, design=design)) + "\n")
            handle.flush()
        echo(f"record-curves: {len(jobs)} trainings, {len(jobs) - len(todo)} in {out} already, "
             f"{len(todo)} to go, {workers} at a time")
        started = time.time()
        code = {"code_revision": code_revision(), "training_code": training_code()}
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context,
                                                    initializer=_one_thread) as pool:
            futures = {pool.submit(_record, base, c, s): (c, s) for c, s in todo}
            recorded = failed = 0

            def write(future: concurrent.futures.Future[dict[str, Any]]) -> None:
                nonlocal recorded, failed
                config, seed = futures[future]
                row = run_line(config, seed, future.result())
                row["recorded_on"] = {**row.get("recorded_on", {}), **code}
                handle.write(json.dumps(row) + "\n")
                handle.flush()
                recorded += 1
                failed += row["status"] != "ok"
                left = (time.time() - started) / recorded * (len(todo) - recorded)
                best = (row["best_val"] or {}).get(base.get("metric"))
                echo(f"[{recorded}/{len(todo)}] {row['status']} seed {seed} "
                     f"{base.get('metric')} {'-' if best is None else f'{best:.4f}'} "
                     f"{row['seconds']:.0f} s, about {left / 60:.0f} min left: {row['key']}")

            try:
                for future in concurrent.futures.as_completed(futures):
                    write(future)
            except KeyboardInterrupt:
                _stop(futures, write, echo, out)
                raise
        if todo:
            echo(f"record-curves: done in {(time.time() - started) / 60:.1f} min: {out} holds "
                 f"{len(runs) + recorded} trainings now ({recorded} new"
                 + (f", {failed} of them failed: their reasons are in the table)" if failed
                    else ")"))
    return len(todo)


def same_training(out: Path, header: Mapping[str, Any], *, allow_code_change: bool,
                  echo: Callable[[str], None]) -> None:
    """Before adding to a table: its trainings and the new ones must come from the same
    training code, or the table mixes two trainings under one configuration (a change of a
    loss's defaults, say, moves a whole region of it). A table that records its training
    code's digest (:func:`training_code`) and differs is refused, unless
    ``allow_code_change``; an older table, which records only its revision, gets a warning
    when the revision differs."""
    revision = header.get("code_revision")
    recorded = header.get("training_code")
    if recorded is None:
        if revision != code_revision():
            echo(f"record-curves: warning: {out} was recorded at revision {revision}, before "
                 f"tables recorded their training code, and this is {code_revision()}: if "
                 f"the training changed in between, the new trainings differ from the old "
                 f"(benchmarks/seed_noise.py compares a table's later seeds with its first)")
        return
    if recorded != training_code() and not allow_code_change:
        raise UserError(
            f"{out} was recorded by other training code (revision {revision}, training code "
            f"{recorded}; this is {code_revision()}, {training_code()}), so its trainings and "
            f"the new ones would differ; continue it from that revision (git worktree add DIR "
            f"{str(revision).split('+')[0]}), give another --out, or add --allow-code-change "
            f"to mix them (each line records the code that trained it)")


def _stop(futures: Mapping[concurrent.futures.Future[Any], Any],
          write: Callable[[concurrent.futures.Future[Any]], None],
          echo: Callable[[str], None], out: Path) -> None:
    """Ctrl-C: the trainings not started are dropped (a process pool would otherwise run every
    one of them before it shuts down); those in flight (and the one the pool has already
    handed to a worker's queue) are written when they finish, as usual; one that the interrupt
    ended is not written; a second Ctrl-C stops at once. The same command continues where the
    table stops."""
    dropped = sum(future.cancel() for future in futures)
    running = [f for f in futures if not f.cancelled() and not f.done()]
    echo(f"record-curves: interrupted: {dropped} trainings not started; waiting for the "
         f"{len(running)} in flight (Ctrl-C again: stop now); the same command continues {out}")
    for future in concurrent.futures.as_completed(running):
        if future.exception() is None:  # a training the interrupt did not reach
            write(future)


def design_jobs(space: Space, *, sample: int | None, second_seed: int,
                limit: int | None = None) -> list[tuple[dict[str, Any], int]]:
    """The trainings a table of ``space`` holds, in the order they are recorded: (flat
    configuration, seed).

    A grid: every point (or a seeded random ``limit`` of them) with seed 0 in a seeded random
    order, so a table cut short is a random sample of the grid, then ``second_seed`` of them
    with seed 1. A sample of ``sample`` configurations: the warm starts, then the space's Sobol
    points (:meth:`Space.sample_points`) in their order (a prefix of the sequence is itself
    spread out), every ``k``-th followed at once by its seed-1 training, so a recording cut
    short keeps its share of repeats."""
    if sample is None:
        points = [config_from_sample(p) for p in space.grid_points()]
        if limit is not None:
            points = random.Random(0).sample(points, min(limit, len(points)))
        rng = random.Random(0)
        jobs = [(p, 0) for p in rng.sample(points, len(points))]
        return jobs + [(p, 1) for p in rng.sample(points, min(second_seed, len(points)))]
    if sample < 1:
        raise UserError(f"--sample must be at least 1 configuration, got {sample}")
    points: list[dict[str, Any]] = []
    for named in [*space.warm_starts(), *space.sample_points(sample)]:
        point = config_from_sample(named)
        if point not in points:
            points.append(point)
    every = max(1, len(points) // second_seed) if second_seed else 0
    jobs = []
    for i, point in enumerate(points):
        jobs.append((point, 0))
        if every and i % every == every - 1 and i // every < second_seed:
            jobs.append((point, 1))
    return jobs


def repeat_jobs(out: Path, runs: list[dict[str, Any]],
                seeds: int) -> list[tuple[dict[str, Any], int]]:
    """``--repeat-seeds``: every configuration of the table's ``runs`` recorded with two or more
    seeds (whatever their outcome), with each seed below ``seeds`` it lacks; seed by seed, in
    the table's order, so a recording cut short has spread its new seeds over the
    configurations."""
    have: dict[str, tuple[dict[str, Any], set[int]]] = {}
    for run in runs:
        have.setdefault(run["key"], (run["config"], set()))[1].add(int(run["seed"]))
    repeated = [(config, seeds_of) for config, seeds_of in have.values() if len(seeds_of) >= 2]
    if not repeated:
        raise UserError(f"--repeat-seeds adds seeds to the configurations a table holds with two "
                        f"or more seeds, but {out} has none ({len(have)} configurations, one "
                        f"seed each); record some with --second-seed N first")
    return [(config, seed) for seed in range(seeds)
            for config, seeds_of in repeated if seed not in seeds_of]


def _one_thread() -> None:
    import torch  # in the worker process

    torch.set_num_threads(1)


_DATASETS: dict[tuple[Any, ...], Any] = {}


def _record(base: Mapping[str, Any], config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """In a worker process: one configuration trained and its curve recorded."""
    from dmlsearch.search.replay.curve import record_curve  # torch, in the worker
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.trial import load_for

    cfg = TrialConfig.from_flat({**base, **config, "seed": seed})
    data_key = (cfg.dataset, cfg.data_root, cfg.image_size, cfg.train_crops, cfg.cache)
    if data_key not in _DATASETS:
        _DATASETS[data_key] = load_for(cfg)
    from dmlsearch.search.replay.table import machine
    from dmlsearch.trainables.device import resolve_device

    # where this training ran: a table recorded partly on a lent GPU machine and resumed on
    # a CPU says so per line (lines without it ran where the header's machine says)
    where = {"device": str(resolve_device(cfg.device)), "cpu": machine()["cpu"]}
    return {**record_curve(cfg, _DATASETS[data_key]), "recorded_on": where}
