"""Run a dmlsearch search on a Ray cluster's head node, joining the running cluster.

With the cluster launcher (the script is copied to the head and run there)::

    ray submit cluster/aws.yaml cluster/run_search.py -- --storage s3://BUCKET/dmlsearch ...

With the job server of a cluster that already runs (the driver runs on the head)::

    ray job submit --address http://127.0.0.1:8265 -- \\
        python '~/dmlsearch/cluster/run_search.py' --storage s3://BUCKET/dmlsearch ...

It takes the options of ``dmlsearch run`` (``--help`` lists them); ``compare ...`` runs a
comparison of methods instead (the options of ``dmlsearch compare``: every method's search
shares the cluster at once); ``resume DIR`` continues a search or comparison whose driver
stopped, as ``dmlsearch resume`` does. Ray Tune's results and checkpoints
must be on storage every node reaches (``--storage``: an NFS folder, ``s3://``, ``gs://``) so
that a trial restarted on another node finds its last checkpoint. See cluster/README.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] not in ("run", "compare", "resume"):
        args = ["run", *args]
    # Join the cluster this node belongs to (under `ray job submit`, RAY_ADDRESS is set already);
    # without it the driver would start a private one-node Ray instance.
    os.environ.setdefault("RAY_ADDRESS", "auto")
    asked_help = any(a in ("-h", "--help") for a in args)
    if args[0] in ("run", "compare") and not asked_help and not any(
            a == "--storage" or a.startswith("--storage=") for a in args):
        print("run_search: note: no --storage: trial checkpoints stay in <out>/ray, which every "
              "node must see (NFS); otherwise give --storage s3://..., gs://... or a shared "
              "folder", file=sys.stderr)
    from dmlsearch.search.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
