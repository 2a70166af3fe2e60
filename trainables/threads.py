"""The CPU threads a fit computes with: one fixed count, applied before training, recorded.

torch's CPU kernels split their sums (BatchNorm statistics, convolution weight gradients, losses)
by the thread team, so a configuration trains to other numbers with another team size. What a
process gets when nobody fixes the count is not the configuration's to decide:

- the count itself comes from the process's environment (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``:
  Ray sets ``OMP_NUM_THREADS`` to a worker's CPUs; a CI job or a shell may export it) or, without
  it, from the machine's cores, so ``threads: 0`` in an export meant "whatever the process that
  retrains it has";
- with ``OMP_DYNAMIC=true`` GNU OpenMP caps every team at (CPUs - the 15-minute load average):
  on a busy machine the team shrinks, the sums split differently, and oneDNN's weight gradients,
  partitioned for the requested team, change from one call to the next (measured:
  docs/benchmarks.md, CPU threads); ``torch.set_num_threads`` does not switch it off;
- MKL adjusts its own team (``MKL_DYNAMIC``, on by default) unless the count is set explicitly:
  torch switches it off only in ``torch.set_num_threads``.

:func:`pin` fixes all three for the calling thread (a fit's). A CPU fit pins ``threads`` (0: the
count the process has at that moment) and records the count it used, which the retrain writes into
the export, so ``dmlsearch train`` computes with the same team on the same machine whatever its
environment or load. Inter-op threads (``torch.jit``'s
``fork``) run none of a fit's kernels and are left alone (torch allows setting them once).
"""

from __future__ import annotations

import ctypes
import functools

import torch

__all__ = ["pin"]


@functools.lru_cache(maxsize=1)
def _openmp() -> ctypes.CDLL | None:
    """The OpenMP runtime torch loaded (its symbols are global), or None (a build without it)."""
    try:
        library = ctypes.CDLL(None)
    except (OSError, TypeError):  # a platform without a global symbol table (Windows)
        return None
    return library if hasattr(library, "omp_set_dynamic") else None


def pin(threads: int) -> int:
    """Compute with ``threads`` intra-op threads (0: the count this process has now), with
    OpenMP's adjustment off in the calling thread (the fit's: its teams are the ones that count)
    and MKL's off; returns the count."""
    count = threads or torch.get_num_threads()
    runtime = _openmp()
    if runtime is not None:
        runtime.omp_set_dynamic(0)  # this thread's teams: exactly the count asked for
    torch.set_num_threads(count)  # also MKL's count, and MKL's dynamic adjustment off
    return count

