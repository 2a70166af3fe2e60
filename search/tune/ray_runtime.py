"""Starting and stopping Ray for a search, and what Ray must not do with the driver's secrets."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["init_ray", "keep_credentials_home", "ray_output_to", "ray_running", "shutdown_ray"]

# Set before Ray is imported anywhere: quieter logs (usage reports: api/_offline.py).
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
        with _no_idle_workers():
            ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                     dashboard_host="127.0.0.1", logging_level=logging.WARNING)


_PRESTART = "RAY_prestart_worker_first_driver"


@contextlib.contextmanager
def _no_idle_workers() -> Iterator[None]:
    """Ray's local node started without its idle workers. When the first driver connects, Ray
    starts one worker per CPU for the tasks it expects, but Ray Tune gives every trial's actor
    a runtime environment (``ray.tune.execution.class_cache``), which only a worker started
    for it may run: those workers are never used (each held 42 MiB and started in about 0.4
    CPU-s here: docs/benchmarks.md, orchestration). Read by the raylet when it starts (a
    variable it does not know is ignored); a value the user set is kept."""
    if _PRESTART in os.environ:
        yield
        return
    os.environ[_PRESTART] = "0"
    try:
        yield
    finally:
        os.environ.pop(_PRESTART, None)


def ray_running() -> bool:
    """Whether Ray is started in this process (a search started now leaves it running after;
    never imports Ray)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def shutdown_ray() -> None:
    ray = sys.modules.get("ray")  # never imported: never started (and no second spent importing)
    if ray is not None and ray.is_initialized():
        ray.shutdown()


_RAY_LOGGERS = ("ray", "ray.tune", "ray.train", "ray.air", "ray.data")


@contextlib.contextmanager
def ray_output_to(log: Path | None) -> Iterator[None]:
    """Ray's console output into the file ``log`` while the block runs: what Ray Tune prints,
    the output of the trials' processes that Ray forwards to the driver, and the log records
    and warnings of Ray and its libraries. The driver's own lines (progress, summary, errors)
    were written to streams taken before, so they keep the terminal. ``None``: leave Ray's
    output on the terminal (``--verbose``)."""
    if log is None:
        yield
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", buffering=1) as handle:  # an append-only log, written as it comes
        saved = sys.stdout, sys.stderr
        moved = _retarget_ray_loggers(handle, consoles=(*saved, sys.__stdout__, sys.__stderr__))
        sys.stdout = sys.stderr = handle
        try:
            yield
        finally:
            sys.stdout, sys.stderr = saved
            # Ray's console handlers get back the stream they had; those made inside the block
            # (when Ray was first imported, writing to ``handle`` then) the terminal's stderr.
            for handler, stream in moved.items():
                handler.stream = stream
            _retarget_ray_loggers(saved[1], consoles=(handle,))


def _retarget_ray_loggers(stream: Any, *, consoles: tuple[Any, ...]
                          ) -> dict[logging.StreamHandler[Any], Any]:
    """Point the console handlers of Ray's loggers (those writing to one of ``consoles``) at
    ``stream``; other handlers (a test runner's, a user's file) are left alone. Returns the
    handlers moved, with the stream each had."""
    moved: dict[logging.StreamHandler[Any], Any] = {}
    for name in _RAY_LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(
                    handler, logging.FileHandler) and any(handler.stream is c for c in consoles):
                moved[handler] = handler.stream
                handler.stream = stream  # no flush of the old stream: it may be closed
    return moved
