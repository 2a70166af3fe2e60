"""The learning-curve table's format, written and read here and nowhere else.

A table is JSON lines: a ``header`` line (the grid space file, its base settings, the data
file's SHA-256, the metric, the code revision, the machine, the command), then one ``run`` line
per training (a configuration and a seed), appended as each finishes, so recording resumes where
it stopped (:mod:`.recording`) and a line cut short by a crash is skipped on reading.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmlsearch.search.provenance import code_revision
from dmlsearch.search.provenance import training_code
from dmlsearch.spaces import Space
from dmlsearch.trainables.errors import UserError

__all__ = ["TABLE_FORMAT", "Curve", "CurveTable", "config_key", "header_line", "load_table",
           "machine", "read_lines", "recording_session", "run_line"]

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
    # the session that recorded it: "" for the header's, else its line's ``recorded_on`` (the
    # device, CPU and code of a table resumed elsewhere); seeds of one session are alike
    session: str = ""

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

    @property
    def sampled(self) -> bool:
        """Whether the table holds a spread sample of a space (``record-curves --sample``),
        answered through a surrogate, rather than a grid, answered by its nearest point."""
        return (self.header.get("design") or {}).get("kind") == "sobol"

    def keys(self) -> list[str]:
        """The settings the grid varied."""
        return sorted({k for c in self.curves.values() for k in c.config})

    def configs(self) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for key, _seed in self.curves:
            seen.setdefault(key, self.curves[(key, _seed)].config)
        return list(seen.values())

    def grid(self) -> dict[str, list[Any]]:
        """Each setting the table varies, with its values (sorted)."""
        values: dict[str, set[Any]] = {}
        for config in self.configs():
            for key, value in config.items():
                values.setdefault(key, set()).add(value)
        return {k: sorted(v, key=lambda x: (isinstance(x, str), x)) for k, v in values.items()}


def config_key(config: Mapping[str, Any]) -> str:
    """A configuration's key in a table: its settings as canonical JSON."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


_TABLES: dict[tuple[str, float], CurveTable] = {}


def recording_session(run: Mapping[str, Any]) -> str:
    """Where and by which code a run line was trained: "" when it says nothing (the header's
    machine and code), else its ``recorded_on`` as sorted JSON (the training code's digest
    standing for the revision when it has one: commits elsewhere do not split a session)."""
    where = dict(run.get("recorded_on") or {})
    if "training_code" in where:
        where.pop("code_revision", None)
    return json.dumps(where, sort_keys=True) if where else ""


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
                      best_epoch=run.get("best_epoch"), test_at_best=run.get("test_at_best"),
                      session=recording_session(run))
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


def header_line(space: Space, base: Mapping[str, Any], command: str, *,
                design: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The header of a new table: what was recorded (``design``: the grid, or a sample of the
    space), on which data, code and machine."""
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
        "design": dict(design or {"kind": "grid"}),
        "metric": base.get("metric"), "seeds": [0, 1], "code_revision": code_revision(),
        "training_code": training_code(),
        "machine": machine(), "command": command,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run_line(config: Mapping[str, Any], seed: int, curve: Mapping[str, Any]) -> dict[str, Any]:
    """The line of one recorded training (``curve``: :func:`.curve.record_curve`'s result)."""
    return {"kind": "run", "key": config_key(config), "config": dict(config), "seed": seed,
            **curve}


def machine() -> dict[str, Any]:
    """This machine, as a table's header (and a line recorded elsewhere) names it."""
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
