"""Starting and stopping Ray for a search, and what Ray must not do with the driver's secrets."""

from __future__ import annotations

import logging
import os
import re
import sys

__all__ = ["init_ray", "keep_credentials_home", "shutdown_ray"]

# Set before Ray is imported anywhere: no usage reports over the network, quieter logs.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "1")

_CREDENTIAL = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL", re.IGNORECASE)


def keep_credentials_home() -> None:
    """Ray Tune hands the driver's cloud credentials (``AWS_SECRET_ACCESS_KEY``...) to every
    trial as runtime-environment variables, and Ray's runtime-env agent writes them into its
    session logs. Stop that: local trials inherit the environment anyway, and the nodes of a
    cluster use their own credentials (instance role, service account), never the driver's."""
    try:
        from ray.tune.execution import class_cache
    except ImportError:  # a Ray without the hand-over
        return
    names = getattr(class_cache, "ENV_VARS_TO_PROPAGATE", None)
    if isinstance(names, (set, frozenset)):
        class_cache.ENV_VARS_TO_PROPAGATE = {n for n in names if not _CREDENTIAL.search(n)}


def init_ray(*, num_cpus: int | None = None, num_gpus: int | None = None) -> None:
    import ray

    keep_credentials_home()
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):  # inside `ray submit` / `ray job submit`: join the cluster
        ray.init(logging_level=logging.WARNING)
    else:
        # No dashboard; what Ray still serves over HTTP listens on this machine only.
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                 dashboard_host="127.0.0.1", logging_level=logging.WARNING)


def shutdown_ray() -> None:
    ray = sys.modules.get("ray")  # never imported: never started (and no second spent importing)
    if ray is not None and ray.is_initialized():
        ray.shutdown()
