"""A deliberately misleading transfer source (issue 36): a recorded learning-curve table whose
configurations are mirrored through the middle of their space.

Every searched setting of a configuration is reflected within its range: a number ``x`` in
``[low, high]`` becomes ``low + high - x`` (on a log range, ``low * high / x``, the reflection of
``log x``), the i-th of n choices becomes the (n-1-i)-th. The recorded curves stay as they were
measured: the mirrored table's curve at ``mirror(c)`` is the original's curve at ``c``. So the
mirrored table is a real training landscape turned around: where the original is good, the
mirror is whatever the original is at the opposite corner, and a search that learnt the mirror
starts the original's search in the region the original scores low (unless the landscape is
symmetric, which the benchmark measures: ``search_transfer.misleading``).

The file is derived, never recorded: it is written on first use next to nothing tracked
(``benchmarks/curves/derived/``, ignored by git), from the original table and the space whose
ranges are reflected, and written again when the original changes (its SHA-256 is in the
mirrored header).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["mirror_config", "mirrored", "write_mirrored"]


def mirror_value(value: Any, param: Any) -> Any:
    """``value`` reflected within ``param``'s range or choices (see the module docstring)."""
    if param.kind == "categorical":
        choices = list(param.choices)
        return choices[len(choices) - 1 - choices.index(value)]
    low, high = float(param.low), float(param.high)
    if param.log:
        out = low * high / float(value)
    else:
        out = low + high - float(value)
    out = min(max(out, low), high)  # a last-bit overshoot of the range
    return int(round(out)) if param.kind == "int" else out


def mirror_config(config: Mapping[str, Any], params: Sequence[Any]) -> dict[str, Any]:
    """``config`` with every setting one of ``params`` declares reflected; the others kept. A
    space that declares a key in several branches (``when:``) has no one mirror: refused."""
    by_key = {p.key: p for p in params}
    if len(by_key) < len(params):
        raise ValueError("a mirrored table needs a space without branches (each setting "
                         f"declared once); got {sorted(p.key for p in params)}")
    return {k: (mirror_value(v, by_key[k]) if k in by_key else v) for k, v in config.items()}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_mirrored(source: Path, out: Path, params: Sequence[Any], *, space_name: str) -> Path:
    """Write the mirror of the table ``source`` to ``out`` (atomically: processes that write it
    at once leave one whole file)."""
    from dmlsearch.search.replay.table import config_key
    from dmlsearch.search.replay.table import read_lines

    header, runs = read_lines(source)
    if header is None:
        raise ValueError(f"{source} is not a learning-curve table (no header line)")
    keys = sorted(p.key for p in params)
    header = {**header, "derived": {
        "kind": "mirror", "from": source.name, "sha256": _sha256(source),
        "settings": keys, "space": space_name,
        "how": "each setting reflected within its range (log ranges in log space), choices "
               "in reverse order; the curves are the original's (benchmarks/mirrored_table.py)"}}
    lines = [json.dumps(header)]
    for run in runs:
        config = mirror_config(run["config"], params)
        lines.append(json.dumps({**run, "key": config_key(config), "config": config}))
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    with os.fdopen(handle, "w") as file:
        file.write("\n".join(lines) + "\n")
    os.chmod(tmp, 0o644)  # mkstemp's 0o600: a table anyone here may read
    os.replace(tmp, out)
    return out


def mirrored(source: Path, out: Path, params: Sequence[Any], *, space_name: str) -> Path:
    """``out``, the mirror of ``source``: written when missing or made from another version of
    ``source``."""
    if out.is_file():
        with out.open() as file:
            header = json.loads(file.readline() or "{}")
        if (header.get("derived") or {}).get("sha256") == _sha256(source):
            return out
    return write_mirrored(source, out, params, space_name=space_name)
