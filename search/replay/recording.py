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
                 echo: Callable[[str], None] = print) -> int:
    """Train every grid point of ``space`` (with ``overrides``) with seed 0, and
    ``second_seed`` of them (a seeded random subset) again with seed 1, ``workers`` at a time,
    one CPU thread each (GPU if visible); append each to ``out``. ``limit``: a seeded random
    sample of that many grid points instead of every one (a smoke test). Resumes: trainings
    already in ``out`` are skipped. Returns the number trained now."""
    if space.params == ():
        raise UserError(f"space {space.name!r} searches nothing: a table needs a grid")
    points = [config_from_sample(p) for p in space.grid_points()]
    if limit is not None:
        points = random.Random(0).sample(points, min(limit, len(points)))
    base = {**space.base, **overrides}
    if "data_root" in base and base["data_root"]:
        base["data_root"] = str(Path(str(base["data_root"])).expanduser().resolve())
    rng = random.Random(0)  # a table cut short is a random sample of the grid
    jobs = [(p, 0) for p in rng.sample(points, len(points))]
    jobs += [(p, 1) for p in rng.sample(points, min(second_seed, len(points)))]
    header, runs = read_lines(out)
    done = {(r["key"], r["seed"]) for r in runs}
    todo = [(c, s) for c, s in jobs if (config_key(c), s) not in done]
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as handle:  # append-only: a line cut by a crash is skipped on read
        if header is None:
            handle.write(json.dumps(header_line(space, base, command)) + "\n")
            handle.flush()
        echo(f"record-curves: {len(jobs)} trainings, {len(jobs) - len(todo)} in {out} already, "
             f"{len(todo)} to go, {workers} at a time")
        started = time.time()
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context,
                                                    initializer=_one_thread) as pool:
            futures = {pool.submit(_record, base, c, s): (c, s) for c, s in todo}
            for i, future in enumerate(concurrent.futures.as_completed(futures), 1):
                config, seed = futures[future]
                row = run_line(config, seed, future.result())
                handle.write(json.dumps(row) + "\n")
                handle.flush()
                left = (time.time() - started) / i * (len(todo) - i)
                best = (row["best_val"] or {}).get(base.get("metric"))
                echo(f"[{i}/{len(todo)}] {row['status']} seed {seed} {base.get('metric')} "
                     f"{'-' if best is None else f'{best:.4f}'} {row['seconds']:.0f} s, "
                     f"about {left / 60:.0f} min left: {row['key']}")
    return len(todo)


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
    data_key = (cfg.dataset, cfg.data_root, cfg.image_size)
    if data_key not in _DATASETS:
        _DATASETS[data_key] = load_for(cfg)
    return record_curve(cfg, _DATASETS[data_key])
