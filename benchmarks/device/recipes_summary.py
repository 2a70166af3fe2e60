"""The headline numbers of ``benchmarks/device/recipes.sh`` (issue #32) from the files it wrote.

    python benchmarks/device/recipes_summary.py OUT PARTS_FILE MACHINE_FILE

Reads ``OUT``'s ``a_recipe.json``, ``b_pack_1.json``, ``b_pack_4.json``, ``b_pack_4_mps.json``
and ``c_e2e.json`` (any may be missing or hold an error: that part is reported as such), the
parts' exit codes and seconds (``PARTS_FILE``: lines ``name rc seconds``) and the machine's
description (``MACHINE_FILE``: ``key: value`` lines); writes ``OUT/summary.json`` and prints the
same as text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PACK_GOAL = 2.5  # four trials on one GPU against one (issue #23's goal)
PACK_RECORDED = 1.54  # docs/benchmarks.md, H100, 2026-11-24, without MPS


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"missing": f"{path.name}: {type(exc).__name__}"}


def _pack_rate(doc: Any) -> tuple[int | None, float | None]:
    """(trials, total images/s) of the one row of a ``gpu.py --pack N`` run."""
    rows = doc.get("pack") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        return None, None
    return rows[0].get("trials"), rows[0].get("total_images_per_s")


def _pack_error(doc: Any) -> str | None:
    """Why a pack run gave no row: its file missing, or gpu.py's error for the section."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    if "missing" in doc:
        return str(doc["missing"])
    pack = doc.get("pack")
    return str(pack.get("error")) if isinstance(pack, dict) else None


def _recipe(doc: Any) -> Any:
    rows = doc.get("recipe") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        return rows if rows is not None else doc
    return [{"model": m["model"], "batch": m["batch_size"], "precision": m.get("precision"),
             "phase": p["phase"], "recipe_images_per_s": round(p["recipe_median"], 1),
             "before_images_per_s": round(p["before_median"], 1),
             "ratio": round(p["ratio_recipe_to_before_median"], 3),
             "ratio_range": [round(x, 3) for x in p["ratio_range"]],
             "recipe_trunk_trainable": p["recipe_trunk"]["trunk_trainable_tensors"],
             "recipe_bn_training": p["recipe_trunk"]["batchnorms_in_train_mode"]}
            for m in rows for p in m["phases"]]


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def summarise(out: Path, parts_file: Path, machine_file: Path) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    if parts_file.is_file():
        for line in parts_file.read_text().splitlines():
            name, rc, seconds = (line.split() + ["?", "?"])[:3]
            parts[name] = {"rc": rc, "seconds": seconds}
    machine: dict[str, str] = {}
    if machine_file.is_file():
        for line in machine_file.read_text().splitlines():
            key, _, value = line.partition(": ")
            if value:
                machine[key.strip()] = (machine.get(key.strip(), "") + " " + value).strip()
    _, one = _pack_rate(_load(out / "b_pack_1.json"))
    packed, four = _pack_rate(_load(out / "b_pack_4.json"))
    mps_doc = _load(out / "b_pack_4_mps.json")
    _, four_mps = _pack_rate(mps_doc)
    budget = _load(out / "c_e2e.json")
    summary = {
        "machine": machine, "parts": parts,
        "a_recipe_cost": _recipe(_load(out / "a_recipe.json")),
        "b_packing": {
            "packed_trials": packed,
            "one_trial_images_per_s": one, "four_trials_images_per_s": four,
            "four_over_one": _ratio(four, one),
            "four_trials_mps_images_per_s": four_mps,
            "four_mps_over_one": _ratio(four_mps, one),
            "four_mps_over_four": _ratio(four_mps, four),
            "mps": machine.get("mps", "unknown"),
            "goal_four_over_one": PACK_GOAL, "recorded_before_without_mps": PACK_RECORDED,
            "errors": {name: _pack_error(_load(out / f"{name}.json"))
                       for name in ("b_pack_1", "b_pack_4", "b_pack_4_mps")},
        },
        "c_learned_distance": {
            "runs": budget.get("runs"), "summary": budget.get("summary"),
            "missing": budget.get("missing")} if isinstance(budget, dict) else budget,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def main() -> None:
    out, parts_file, machine_file = (Path(a) for a in sys.argv[1:4])
    summary = summarise(out, parts_file, machine_file)
    print(json.dumps(summary, indent=1)[:20000])


if __name__ == "__main__":
    main()
