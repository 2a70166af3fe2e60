"""Learning-curve tables: every point of a grid space trained for real, once, with every epoch's
validation metrics and times and the test metrics of each epoch's selected model; recorded by
``dmlsearch record-curves`` and replayed by ``dmlsearch run --replay`` (which compares search
methods over many seeds in minutes, before GPU-hours are spent on one).

A table is JSON lines: a ``header`` line (the grid space file, its base settings, the data
file's SHA-256, the metric, the code revision, the machine, the command), then one ``run`` line
per training (a configuration and a seed), appended as each finishes, so recording resumes where
it stopped. This module owns the format: it writes it, reads it, and finds the curve a
configuration replays.

**Which curve a configuration replays.** The search space a table is replayed with may be finer
than the grid (a continuous learning rate over the grid's range); each searched value is snapped
to the nearest value the table holds for that setting (in log scale for positive values spanning
a factor of 10 or more, else linearly), categorical values must be in the table, and the table's
seed is the trial's ``seed`` when it was recorded, else the first recorded one.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import platform
import random
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmlsearch.search.provenance import code_revision
from dmlsearch.spaces import Space
from dmlsearch.spaces import config_from_sample
from dmlsearch.trainables.errors import UserError

__all__ = ["Curve", "CurveTable", "TABLE_FORMAT", "load_table", "record_table"]

TABLE_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Curve:
    """One recorded training: its configuration (the grid's searched settings) and seed, and
    what every epoch showed."""

    config: dict[str, Any]
    seed: int
    status: str  # "ok", or "failed" (its reason)
    reason: str | None
    epochs: list[dict[str, Any]]  # epoch, train_loss, val {...}, seconds, cpu_seconds, test?
    best_epoch: int | None
    test_at_best: dict[str, float] | None

    def test_at(self, epoch: int, metric: str, mode: str) -> dict[str, float] | None:
        """The test metrics of the model a trial stopped after ``epoch`` epochs selects (its
        best validation epoch up to there)."""
        sign = -1.0 if mode == "min" else 1.0
        best = None
        for row in self.epochs[:epoch]:
            value = row["val"].get(metric)
            if value is not None and (best is None or sign * value > sign * best["val"][metric]):
                best = row
        return None if best is None else best.get("test")


@dataclasses.dataclass(frozen=True)
class CurveTable:
    path: Path
    header: dict[str, Any]
    curves: dict[tuple[str, int], Curve]  # (configuration key, seed) -> curve

    @property
    def metric(self) -> str:
        return str(self.header.get("metric") or "map@r")

    @property
    def base(self) -> dict[str, Any]:
        """The fixed settings the table was recorded with."""
        return dict(self.header.get("base") or {})

    @property
    def epochs(self) -> int:
        return int(self.base.get("epochs", max((len(c.epochs) for c in self.curves.values()),
                                               default=0)))

    def keys(self) -> list[str]:
        """The settings the grid varied."""
        return sorted({k for c in self.curves.values() for k in c.config})

    def configs(self) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for key, _seed in self.curves:
            seen.setdefault(key, self.curves[(key, _seed)].config)
        return list(seen.values())

    def lookup(self, config: Mapping[str, Any]) -> Curve:
        """The curve ``config`` replays (module docstring): its grid point, and its seed's
        training when the table has one, else the first seed recorded for that point."""
        point = self.snap(config)
        key = config_key(point)
        seeds = sorted(seed for k, seed in self.curves if k == key)
        seed = int(config.get("seed", seeds[0])) if seeds else 0
        return self.curves[(key, seed if seed in seeds else seeds[0])]

    def snap(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The grid point nearest to ``config``'s values of the grid's settings."""
        candidates = self.configs()
        point: dict[str, Any] = {}
        keys = [k for k in self.keys() if k in config]
        # categorical settings first: they pick the branch (a loss's own parameters)
        keys.sort(key=lambda k: _is_number(config[k]))
        for key in keys:
            options = {repr(c[key]): c[key] for c in candidates if key in c}
            if not options:
                continue
            value = _nearest(config[key], list(options.values()))
            if value is None:
                raise UserError(
                    f"the replay table {self.path.name} has no {key}={config[key]!r} (it holds "
                    f"{sorted(map(str, options.values()))}); replay a space whose values the "
                    "table covers")
            point[key] = value
            candidates = [c for c in candidates if key not in c or c[key] == value]
        missing = [k for c in candidates[:1] for k in c if k not in point]
        if not candidates or missing:
            raise UserError(f"the replay table {self.path.name} has no configuration for "
                            f"{dict(config)} (missing settings: {missing})")
        return candidates[0]


def config_key(config: Mapping[str, Any]) -> str:
    """A configuration's key in a table: its settings as canonical JSON."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _nearest(value: Any, options: list[Any]) -> Any:
    if not _is_number(value) or not all(_is_number(o) for o in options):
        return value if value in options else None
    log = all(o > 0 for o in options) and value > 0 and max(options) >= 10 * min(options)

    def distance(option: float) -> float:
        return abs(math.log(option) - math.log(value)) if log else abs(option - value)

    return min(options, key=distance)


_TABLES: dict[tuple[str, float], CurveTable] = {}


def load_table(path: Path | str) -> CurveTable:
    """A table read (cached per process by path and modification time); a missing or foreign
    file is a :class:`UserError`."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise UserError(f"replay table {path} does not exist; record one with `dmlsearch "
                        "record-curves` or give the path of a .jsonl table")
    stamp = (str(path), path.stat().st_mtime)
    if stamp in _TABLES:
        return _TABLES[stamp]
    header, runs = read_lines(path)
    if header is None or header.get("format") != TABLE_FORMAT:
        raise UserError(f"{path} is not a learning-curve table (expected a header line of "
                        f"format {TABLE_FORMAT}, as `dmlsearch record-curves` writes)")
    if not runs:
        raise UserError(f"the replay table {path} holds no recorded training yet; let "
                        "`dmlsearch record-curves` run (it resumes)")
    curves = {}
    for run in runs:
        curve = Curve(config=dict(run["config"]), seed=int(run["seed"]), status=run["status"],
                      reason=run.get("reason"), epochs=list(run["epochs"]),
                      best_epoch=run.get("best_epoch"), test_at_best=run.get("test_at_best"))
        curves[(config_key(curve.config), curve.seed)] = curve
    table = CurveTable(path=path, header=header, curves=curves)
    _TABLES[stamp] = table
    return table


def read_lines(path: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The header and the run lines of a table file; a line cut short (a crash) is skipped."""
    header, runs = None, []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if row.get("kind") == "header":
                header = row
            elif row.get("kind") == "run":
                runs.append(row)
    return header, runs


# ---- recording ----------------------------------------------------------------------------------
def record_table(space: Space, out: Path, *, overrides: Mapping[str, Any], workers: int,
                 second_seed: int, command: str, sample: int | None = None,
                 echo: Callable[[str], None] = print) -> int:
    """Train every grid point of ``space`` (with ``overrides``) with seed 0, and
    ``second_seed`` of them (a seeded random subset) again with seed 1, ``workers`` at a time,
    one CPU thread each (GPU if visible); append each to ``out``. Resumes: trainings already in
    ``out`` are skipped. Returns the number trained now.

    ``sample``: instead of the grid, the space's warm starts and ``sample`` configurations
    spread over it (:meth:`Space.sample_points`, a seeded Sobol sample: a space with continuous
    ranges), in that order, each of ``second_seed`` of them (evenly spaced in that order)
    followed at once by its second seed, so a recording cut short keeps its share of repeats."""
    if space.params == ():
        raise UserError(f"space {space.name!r} searches nothing: a table needs a grid")
    base = {**space.base, **overrides}
    if "data_root" in base and base["data_root"]:
        base["data_root"] = str(Path(str(base["data_root"])).expanduser().resolve())
    jobs = design_jobs(space, sample=sample, second_seed=second_seed)
    header, runs = read_lines(out)
    done = {(r["key"], r["seed"]) for r in runs}
    todo = [(c, s) for c, s in jobs if (config_key(c), s) not in done]
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as handle:  # append-only: a line cut by a crash is skipped on read
        if header is None:
            handle.write(json.dumps(_header(space, base, command, sample=sample)) + "\n")
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
                row = {"kind": "run", "key": config_key(config), "config": config,
                       "seed": seed, **future.result()}
                handle.write(json.dumps(row) + "\n")
                handle.flush()
                left = (time.time() - started) / i * (len(todo) - i)
                best = (row["best_val"] or {}).get(base.get("metric"))
                echo(f"[{i}/{len(todo)}] {row['status']} seed {seed} {base.get('metric')} "
                     f"{'-' if best is None else f'{best:.4f}'} {row['seconds']:.0f} s, "
                     f"about {left / 60:.0f} min left: {row['key']}")
    return len(todo)


def design_jobs(space: Space, *, sample: int | None, second_seed: int
                ) -> list[tuple[dict[str, Any], int]]:
    """The trainings a table of ``space`` holds, in the order they are recorded: (flat
    configuration, seed). A grid: every point with seed 0 in a seeded random order (a table cut
    short is a random sample of the grid), then ``second_seed`` of them with seed 1. A sample
    (``sample`` configurations): the warm starts, then the Sobol points in their order, every
    ``k``-th of them followed by its seed-1 training."""
    if sample is None:
        points = [config_from_sample(p) for p in space.grid_points()]
        rng = random.Random(0)
        jobs = [(p, 0) for p in rng.sample(points, len(points))]
        return jobs + [(p, 1) for p in rng.sample(points, min(second_seed, len(points)))]
    if sample < 1:
        raise UserError(f"--sample must be >= 1 configurations, got {sample}")
    points = []
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


def _header(space: Space, base: Mapping[str, Any], command: str, *,
            sample: int | None = None) -> dict[str, Any]:
    data = base.get("data_root")
    digest = None
    if data and Path(str(data)).is_file():
        hasher = hashlib.sha256()
        with open(str(data), "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                hasher.update(block)
        digest = hasher.hexdigest()
    source = space.path.read_text() if space.path is not None else ""
    return {
        "kind": "header", "format": TABLE_FORMAT, "space_name": space.name,
        "space_file": space.path.name if space.path else None, "space": source,
        "base": {**base, "data_root": Path(str(data)).name if data else None},
        "data": {"file": Path(str(data)).name if data else None, "sha256": digest},
        "design": {"kind": "grid"} if sample is None else {
            "kind": "sobol", "count": sample, "seed": 0, "warm_starts": True},
        "metric": base.get("metric"), "seeds": [0, 1], "code_revision": code_revision(),
        "machine": _machine(), "command": command,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


_DATASETS: dict[tuple[Any, ...], Any] = {}


def _record(base: Mapping[str, Any], config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """In a worker process: one configuration trained and its curve recorded."""
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.curves import record_curve
    from dmlsearch.trainables.trial import load_for

    cfg = TrialConfig.from_flat({**base, **config, "seed": seed})
    data_key = (cfg.dataset, cfg.data_root, cfg.image_size)
    if data_key not in _DATASETS:
        _DATASETS[data_key] = load_for(cfg)
    from dmlsearch.trainables.device import resolve_device

    # where this training ran: a table recorded partly on a lent GPU machine and resumed on
    # a CPU says so per line (lines without it ran where the header's machine says)
    where = {"device": str(resolve_device(cfg.device)), "cpu": _machine()["cpu"]}
    return {**record_curve(cfg, _DATASETS[data_key]), "recorded_on": where}


def grid_of(table: CurveTable) -> dict[str, list[Any]]:
    """Each setting the table varies, with its values (sorted)."""
    values: dict[str, set[Any]] = {}
    for config in table.configs():
        for key, value in config.items():
            values.setdefault(key, set()).add(value)
    return {k: sorted(v, key=lambda x: (isinstance(x, str), x)) for k, v in values.items()}


def check_replayable(table: CurveTable, fixed: Mapping[str, Any],
                     searched: Sequence[str]) -> None:
    """A space replays ``table`` when its fixed settings agree with the table's and every
    setting it searches is one the table varies."""
    recorded = table.base
    for key, value in fixed.items():
        if key in recorded and key not in ("data_root", "workers", "threads", "device",
                                           "seed") and recorded[key] != value:
            raise UserError(
                f"the replay table {table.path.name} was recorded with {key}={recorded[key]!r},"
                f" but the space sets {key}={value!r}; replay a space with the table's "
                f"settings (e.g. --set {key}={recorded[key]})")
    grid = grid_of(table)
    unknown = [k for k in searched if k not in grid]
    if unknown:
        raise UserError(f"the space searches {unknown}, which the replay table "
                        f"{table.path.name} does not vary (it varies {sorted(grid)}); search "
                        "only those settings in a replay")
