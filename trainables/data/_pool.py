"""Work split into chunks over worker processes that die with the process that started them.

Building a decoded store and checking a dataset's files up front (images, audio) run a
``multiprocessing`` pool of forked workers. Without care, a parent killed mid-way (``kill -9``, a
stopped Ray trial, an out-of-memory kill) leaves its workers decoding on, each printing a
``BrokenPipeError`` traceback when it hands its result to a parent that is gone, and a Ctrl-C
prints one ``KeyboardInterrupt`` traceback per worker. So every worker asks the kernel to kill it
when its parent dies (Linux ``PR_SET_PDEATHSIG``; it exits at once if the parent died before it
asked) and ignores SIGINT: Ctrl-C reaches the whole process group, and the parent alone answers
it (closing the pool on its way out), with one line.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["chunks", "run_chunks", "workers"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def workers() -> int:
    """The CPUs this process may use (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def chunks(items: list, count: int) -> list[list]:
    """``items`` in about ``4 * count`` chunks (so a slow chunk does not hold up the others)."""
    size = max(1, -(-len(items) // max(count * 4, 1)))
    return [items[i : i + size] for i in range(0, len(items), size)]


def run_chunks(jobs: list, func: Callable[[Any], Any], count: int) -> list:
    """``[func(job) for job in jobs]``, over ``count`` worker processes when there are several
    jobs (in this process otherwise)."""
    if count <= 1 or len(jobs) <= 1:
        return [func(job) for job in jobs]
    with _context().Pool(min(count, len(jobs)), initializer=_bound_to_parent,
                         initargs=(os.getpid(),)) as pool:
        return pool.map(func, jobs, chunksize=1)


def _context() -> multiprocessing.context.BaseContext:
    # fork (as torch's DataLoader does on Linux): the workers only decode or read headers, and
    # a spawned one would import torch again through this package.
    return multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")


def _bound_to_parent(parent: int) -> None:
    """A worker's first act: die with ``parent``, leave Ctrl-C to it (the module's notes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above: nobody will be told
        os._exit(0)
