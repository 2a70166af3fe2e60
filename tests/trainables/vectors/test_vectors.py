"""A third input kind is one folder plus one registry entry: the test-only kind of this folder
(fixed-length vectors from a NumPy file) runs a real search end to end (Ray, Optuna, MLflow; two
trials, then the retrain of the two best, tested once, the best registered in MLflow's Model
Registry as its kind's model input says) with no change to the package. It runs in its own
process, so the kind, its dataset and its backbone never join the registries of the other
tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SPACE = Path(__file__).with_name("vectors_space.yaml")

_SEARCH = """
import json, sys
from pathlib import Path

import ray

import dmlsearch
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.input_kinds import kind_of
from dmlsearch.trainables.trial import preflight
from tests.trainables.vectors import register, write_vectors

register()
out, space = Path(sys.argv[1]), sys.argv[2]
data = write_vectors(out.parent / "vectors.npz", classes=24, per_class=12)
dataset = load_dataset("vectors_npz", root=data)
refused = ""
try:  # a backbone of another kind is refused by the same check as for images and audio
    preflight(TrialConfig.from_flat({"dataset": "vectors_npz", "data_root": data}), dataset)
except dmlsearch.UserError as exc:
    refused = str(exc)
ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING",
         runtime_env={"worker_process_setup_hook": "tests.trainables.vectors.register"})
result = dmlsearch.run(space, out=out, trials=2, concurrency=2, data_root=data,
                       retrain_top=2, sampler="grid", scheduler="none", echo=lambda line: None)
registered = result.summary.registered_model
import mlflow, numpy as np, torch
mlflow.set_tracking_uri(f"sqlite:///{out / 'mlflow.db'}")
(spec,) = mlflow.models.get_model_info(f"models:/{registered}").signature.inputs.inputs
model = mlflow.pytorch.load_model(f"models:/{registered}")
with torch.no_grad():
    embedded = model(torch.from_numpy(np.load(data)["vectors"][:5]))
pictures = sorted(p.name for p in out.rglob("*.png"))
print(json.dumps({"states": sorted(result.trials["state"]), "score": result.best_score,
                  "kind": kind_of(result.best_config).name, "refused": refused,
                  "items": len(dataset.images), "channels": dataset.images.channels,
                  "test": result.test_metrics, "registered": registered,
                  "signature": [str(spec.type), list(spec.shape)],
                  "embedded": list(embedded.shape), "pictures": pictures}))
"""


def test_a_third_input_kind_runs_a_search_end_to_end(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", _SEARCH, str(tmp_path / "r"), str(SPACE)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["states"] == ["completed", "completed"]
    assert 0.0 < found["score"] <= 1.0  # map@r of separable classes, from the trials
    assert found["kind"] == "vectors" and found["items"] == 24 * 12 and found["channels"] == 8
    assert "backbone smallcnn takes image input, but dataset vectors_npz is vectors" in \
        found["refused"]
    # the retrain: tested once, registered with the kind's model input, its pictures the kind's
    assert 0.0 < found["test"]["map@r"] <= 1.0
    assert found["registered"] and found["registered"].endswith("/1")
    assert found["signature"] == ["float32", [-1, 8]] and found["embedded"] == [5, 8]
    assert "test_embeddings_2d.png" in found["pictures"]
    assert not {"retrievals.png", "retrievals_top.png", "trials.png"} & set(found["pictures"])
