"""Why a trial failed, in words a person reads: a trial that cannot go on fails alone.

A trial can fail for reasons that are not the user's input (those are caught before any trial
starts, :func:`trainables.trial.preflight`): its loss turned NaN or infinite (raised by the fit
loop as :class:`~trainables.errors.TrialFailed`), its model or batch did not fit in memory (a
CUDA ``torch.OutOfMemoryError``, or the CPU allocator refusing an allocation), or its data could
not be read. :func:`trial_failure` turns such an exception into a :class:`TrialFailed` whose
message starts with the kind of failure and says what to change; the search records it as the
trial's reason and goes on with the other trials.
"""

from __future__ import annotations

from dmlsearch.trainables.errors import TrialFailed
from dmlsearch.trainables.errors import UserError

__all__ = ["DATA", "OUT_OF_MEMORY", "is_out_of_memory", "trial_failure"]

OUT_OF_MEMORY = "out of memory"
DATA = "data loading failed"

# What torch and CUDA say when an allocation fails (CPU: "DefaultCPUAllocator: can't allocate
# memory" / "not enough memory"; CUDA: "CUDA out of memory"; cuDNN/cuBLAS: "..._ALLOC_FAILED").
_OOM_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory",
             "not enough memory", "alloc_failed")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure (GPU or CPU)."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OOM_TEXT)


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def trial_failure(exc: BaseException, *, loading: bool = False) -> TrialFailed | None:
    """The :class:`TrialFailed` that says why ``exc`` ended a trial, or ``None`` when ``exc`` is
    not a failure of the trial alone (a bug, an interrupt: let it propagate as it is).

    ``loading``: ``exc`` came from reading the trial's data (before training).
    """
    if isinstance(exc, TrialFailed):
        return exc
    if is_out_of_memory(exc):
        return TrialFailed(
            f"{OUT_OF_MEMORY}: {_first_line(exc)}; lower batch_size, image_size or "
            "embedding_size, or give the trial more (GPU) memory"
        )
    if loading and isinstance(exc, (UserError, OSError)):
        return TrialFailed(f"{DATA}: {_first_line(exc)}")
    return None
