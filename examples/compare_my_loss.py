"""Compare a loss of your own against two of the thesis's losses, from Python.

    python examples/compare_my_loss.py                       # the built-in glyphs, this machine
    python examples/compare_my_loss.py --data-root items.csv  # images listed in a table
    RAY_ADDRESS=auto MLFLOW_TRACKING_URI=http://127.0.0.1:5000 python examples/compare_my_loss.py

Every method gets the same class-disjoint split, the same budget and the same seeds; each
method's best configuration is retrained on all training classes and tested once, and the
methods are ranked with a paired test over the retrain seeds. With ``RAY_ADDRESS`` set the
comparison joins that Ray cluster (the plug-in travels to every node with the search); with
``MLFLOW_TRACKING_URI`` set everything is logged there and each method's model registered.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import dmlsearch

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", help="a CSV or Parquet table of images (path, label, "
                        "optionally split); default: the built-in glyphs")
    parser.add_argument("--out", default="compare-my-loss", help="the results folder")
    parser.add_argument("--trials", type=int, default=4, help="each method's budget")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=2, help="retrain seeds per method")
    parser.add_argument("--storage", help="Ray Tune's storage every node reaches (a cluster)")
    args = parser.parse_args()

    table = {"dataset": "table", "data_root": args.data_root} if args.data_root else {}
    result = dmlsearch.compare(
        ["margin_proxy", "proxy_anchor", "multi_similarity"],
        plugins=[HERE / "my_loss.py"], out=args.out, trials=args.trials, seeds=args.seeds,
        set={"epochs": args.epochs}, register=True, storage=args.storage, **table)
    print(result.methods.to_string(index=False))
    print(f"report: {result.report}")


if __name__ == "__main__":
    main()
