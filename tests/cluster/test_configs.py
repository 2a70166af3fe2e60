"""The cluster files pass Ray's own checks and hold what a dmlsearch cluster needs.

Launcher YAMLs go through what ``ray up`` does before it contacts a cloud: ``prepare_config``
(merge with the provider's defaults, node types, setup commands) and ``validate_config`` (Ray's
JSON schema and its cross-checks). The on-premise file goes through the whole of ``ray up``'s
bootstrap (``_bootstrap_config``: the local provider's own preparation needs no network). For
AWS and GCP the rest of the bootstrap (IAM roles, VPC, key pairs, instance types) calls the
cloud's API with credentials (boto3, googleapiclient), so it is out of reach offline.

The KubeRay manifest is checked for the fields KubeRay's RayJob CRD requires and the ones
Kubernetes requires of its pods; its entrypoint is parsed by the real ``dmlsearch run`` parser.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
LAUNCHER = ["aws.yaml", "gcp.yaml", "onprem.yaml"]
IMAGE = f"rayproject/ray:{ray.__version__}-py311-gpu"  # the pinned Ray, Python 3.11


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((CLUSTER / name).read_text())


@pytest.mark.parametrize("name", LAUNCHER)
def test_launcher_config_passes_rays_preparation_and_validation(name: str) -> None:
    from ray.autoscaler._private.util import prepare_config
    from ray.autoscaler._private.util import validate_config

    config = prepare_config(_load(name))
    validate_config(config)
    assert config["head_node_type"] in config["available_node_types"]


@pytest.mark.parametrize("name", LAUNCHER)
def test_every_node_gets_the_project_and_the_clusters_token(name: str) -> None:
    from ray.autoscaler._private.util import prepare_config

    raw = _load(name)
    config = prepare_config(raw)
    assert (ROOT / raw["file_mounts"]["~/dmlsearch"] / "pyproject.toml").is_file()  # `ray up`
    assert raw["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"  # from the repo root
    for role in ("head", "worker"):
        setup = " ; ".join(config[f"{role}_setup_commands"])
        assert re.search(r"pip install [^;]*-e ~/dmlsearch", setup), setup
        assert "RAY_AUTH_MODE=token" in " ".join(config[f"{role}_start_ray_commands"])
    assert not {".git", ".venv"} - {p.removeprefix("**/") for p in raw["rsync_exclude"]}


@pytest.mark.parametrize("name", ["aws.yaml", "gcp.yaml"])
def test_cloud_configs_run_the_pinned_ray_and_have_multi_gpu_workers(name: str) -> None:
    from ray.autoscaler._private.util import prepare_config

    config = prepare_config(_load(name))
    assert config["docker"]["image"] == IMAGE
    head = config["head_node_type"]
    workers = {k: v for k, v in config["available_node_types"].items() if k != head}
    assert any(t["resources"].get("GPU", 0) >= 2 and t["max_workers"] >= 1
               for t in workers.values())
    # the head retrains the best configuration in the driver once the search ends
    assert config["available_node_types"][head]["resources"].get("GPU", 0) >= 1


def test_onprem_config_passes_the_whole_ray_up_bootstrap() -> None:
    from ray.autoscaler._private.commands import _bootstrap_config

    raw = _load("onprem.yaml")
    config = _bootstrap_config(raw, no_config_cache=True)
    (node_type,) = config["available_node_types"].values()
    workers = len(raw["provider"]["worker_ips"])
    assert node_type["min_workers"] == node_type["max_workers"] == workers
    assert config["provider"]["head_ip"] == raw["provider"]["head_ip"]


# ---- KubeRay ------------------------------------------------------------------------------
def _pods(job: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    spec = job["spec"]["rayClusterSpec"]
    pods = [("head", spec["headGroupSpec"]["template"]["spec"])]
    pods += [(g["groupName"], g["template"]["spec"]) for g in spec["workerGroupSpecs"]]
    return pods


def test_kuberay_rayjob_has_the_fields_kuberay_requires() -> None:
    job = _load("kuberay-rayjob.yaml")
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", job["metadata"]["name"])
    spec = job["spec"]
    assert isinstance(spec["entrypoint"], str) and spec["entrypoint"].strip()
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == ray.__version__
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    for group in groups:  # rayStartParams is a map of strings to strings
        assert all(isinstance(k, str) and isinstance(v, str)
                   for k, v in group.get("rayStartParams", {}).items())
    names = [g["groupName"] for g in cluster["workerGroupSpecs"]]
    assert names and len(set(names)) == len(names)
    for group in cluster["workerGroupSpecs"]:
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    images = set()
    for _, pod in _pods(job):
        assert pod["containers"], "a pod needs a container"
        volumes = {v["name"] for v in pod.get("volumes", [])}
        for container in pod["containers"]:
            assert container["name"] and container["image"]
            images.add(container["image"])
            limits = container["resources"]["limits"]
            requests = container["resources"].get("requests", limits)
            assert str(limits.get("nvidia.com/gpu")) == str(requests.get("nvidia.com/gpu"))
            assert {m["name"] for m in container.get("volumeMounts", [])} <= volumes
    assert len(images) == 1  # one image (cluster/Dockerfile) everywhere


def test_kuberay_entrypoint_is_a_dmlsearch_run_with_shared_storage() -> None:
    from dmlsearch.search.cli import build_parser
    from dmlsearch.search.options import SearchOptions

    job = _load("kuberay-rayjob.yaml")
    words = shlex.split(job["spec"]["entrypoint"])
    assert words[:2] == ["python", "/home/ray/dmlsearch/cluster/run_search.py"]
    args = SearchOptions.from_args(build_parser().parse_args(["run", *words[2:]]))
    args.check()
    assert args.storage and "://" in args.storage  # every pod reaches it
    mounts = {pod_name: {m["mountPath"] for c in pod["containers"]
                         for m in c.get("volumeMounts", [])} for pod_name, pod in _pods(job)}
    assert any(str(args.out).startswith(p + "/") for p in mounts["head"])  # outlives the pod
    for paths in mounts.values():  # the data is at the same path in every pod
        assert any(str(args.data_root).startswith(p + "/") for p in paths)
    workers = [g for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]]
    gpus = int(workers[0]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"])
    assert args.gpus_per_trial is not None and args.gpus_per_trial < 1
    assert args.concurrency >= gpus / args.gpus_per_trial


def test_the_image_installs_the_project_on_the_pinned_ray() -> None:
    from setuptools.config.pyprojecttoml import read_configuration

    text = (CLUSTER / "Dockerfile").read_text()
    assert re.search(rf"^FROM {re.escape(IMAGE)}$", text, re.M)
    copied = set(re.findall(r"^COPY \S+ (\w+) /home/ray/dmlsearch/\1$", text, re.M))
    folders = read_configuration(ROOT / "pyproject.toml")["tool"]["setuptools"]["package-dir"]
    assert set(folders.values()) <= copied  # the folders behind the dmlsearch.* packages
    assert "pip install --no-cache-dir -e /home/ray/dmlsearch" in text
    job = _load("kuberay-rayjob.yaml")
    assert job["spec"]["entrypoint"].split()[1].startswith("/home/ray/dmlsearch/")
