"""More seeds of a table's repeats, trained by the code of the revision that recorded it
(issue 36).

``dmlsearch record-curves --repeat-seeds K`` trains with the code installed, and adds to a
table only when that is the table's own training code. A table recorded before tables kept
their training code's digest, by a revision whose training differs from today's (the
development tables ``glyphs.jsonl`` and ``omniglot_ms.jsonl`` were recorded at a4c54bd, before
the recipes' fixes: proxies now learn at lr x 100, and ProxyAnchor's high learning rates train
differently), can only be continued by its own code. This script:

- checks out that revision into a git worktree (``--revision``, default the table header's
  ``code_revision``) and lays it out as the ``dmlsearch`` package it was then (``api/`` as the
  package when it existed, else a namespace package of ``search``, ``trainables``, ``spaces``);
- computes the missing seeds as ``--repeat-seeds`` does (``recording.repeat_jobs``);
- trains each in a subprocess that imports that revision's code only (the editable install's
  finder removed), with its recorder's own ``_record``;
- appends each line as the recorder does, its ``recorded_on`` naming the revision and the
  digest of the training code that trained it.

The revision's uncommitted changes (a header's ``+dirty``) cannot be recovered: compare the
new seeds with the first two afterwards (``benchmarks/seed_noise.py``, "later seeds").

    python benchmarks/record_at_revision.py benchmarks/curves/glyphs.jsonl --repeat-seeds 4 \\
        --workers 2 [--revision REV] [--set device=cpu ...] [--data-root DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Run in the subprocess: the revision's recorder trains one (base, configuration, seed).
WORKER = """
import json, os, sys
sys.meta_path[:] = [f for f in sys.meta_path
                    if "__editable__" not in getattr(f, "__module__", "")]
import torch
torch.set_num_threads(1)
try:
    from dmlsearch.search.replay.recording import _record
except ImportError:
    from dmlsearch.search.curves import _record
import dmlsearch.trainables as t
here = os.path.realpath(list(t.__path__)[0])
assert here.startswith(os.path.realpath(sys.argv[1])), here  # the revision's, not ours
base, config, seed = json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
print(json.dumps(_record(base, config, seed)))
"""


def package_tree(revision: str, root: Path) -> Path:
    """A worktree of ``revision`` under ``root`` and, beside it, a folder whose ``dmlsearch``
    is that revision's package (to put first on ``PYTHONPATH``)."""
    tree = root / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(tree),
                    revision], check=True, capture_output=True)
    package = root / "path" / "dmlsearch"
    package.mkdir(parents=True)
    if (tree / "api").is_dir():  # the package face of later revisions
        for item in (tree / "api").iterdir():
            (package / item.name).symlink_to(item)
    for name in ("search", "trainables", "spaces"):
        (package / name).symlink_to(tree / name)
    return tree


def train(tree: Path, base: dict[str, Any], config: dict[str, Any],
          seed: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree.parent / "path")}
    done = subprocess.run([sys.executable, "-c", WORKER, str(tree), json.dumps(base),
                           json.dumps(config), str(seed)], env=env, capture_output=True,
                          text=True, check=False, cwd=tree.parent)
    if done.returncode != 0:
        raise RuntimeError(f"seed {seed} of {config}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    from dmlsearch.search.provenance import source_digest
    from dmlsearch.search.replay.recording import repeat_jobs
    from dmlsearch.search.replay.table import config_key
    from dmlsearch.search.replay.table import machine
    from dmlsearch.search.replay.table import read_lines
    from dmlsearch.search.replay.table import run_line

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", type=Path)
    parser.add_argument("--repeat-seeds", type=int, required=True)
    parser.add_argument("--revision", default=None, help="default: the header's")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="a value of the header's base replaced (device=cpu)")
    parser.add_argument("--data-root", default=None)
    args = parser.parse_args(argv)
    header, runs = read_lines(args.table)
    if header is None:
        parser.error(f"{args.table} holds no table")
    revision = args.revision or str(header["code_revision"]).split("+")[0]
    base = dict(header["base"])
    for item in args.sets:
        key, _, value = item.partition("=")
        try:
            base[key] = json.loads(value)
        except json.JSONDecodeError:
            base[key] = value  # a word: cpu, cuda
    if args.data_root:
        base["data_root"] = str(Path(args.data_root).resolve())
    done = {(r["key"], r["seed"]) for r in runs}
    jobs = [(c, s) for c, s in repeat_jobs(args.table, runs, args.repeat_seeds)
            if (config_key(c), s) not in done]
    print(f"record_at_revision: {len(jobs)} trainings by revision {revision}, "
          f"{args.workers} at a time, into {args.table}")
    with tempfile.TemporaryDirectory() as scratch:
        tree = package_tree(revision, Path(scratch))
        try:
            lost = "+dirty" in str(header.get("code_revision")) and args.revision is None
            note = "; the header's uncommitted changes not recovered" if lost else ""
            code = {"code_revision": f"{revision} (a worktree{note})",
                    "training_code": source_digest(tree / "trainables",
                                                   tree / "search" / "replay" / "curve.py")
                    if (tree / "search" / "replay" / "curve.py").is_file()
                    else source_digest(tree / "trainables")}
            with concurrent.futures.ThreadPoolExecutor(args.workers) as pool, \
                    open(args.table, "a") as handle:
                futures = {pool.submit(train, tree, base, c, s): (c, s) for c, s in jobs}
                for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
                    config, seed = futures[future]
                    curve = future.result()
                    where = {"device": str(base.get("device")), "cpu": machine()["cpu"], **code}
                    row = {**run_line(config, seed, curve), "recorded_on": where}
                    handle.write(json.dumps(row) + "\n")
                    handle.flush()
                    best = max(e["val"][header["metric"]] for e in curve["epochs"])
                    print(f"[{n}/{len(jobs)}] seed {seed} {header['metric']} {best:.4f} "
                          f"{curve['seconds']:.0f} s: {config_key(config)}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                           check=False, capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
