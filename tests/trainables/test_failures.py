"""A trial's own failures are named: out of memory (GPU or CPU), a non-finite loss, bad data."""

from __future__ import annotations

import pytest
import torch

from dmlsearch.trainables.errors import TrialFailed
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.failures import is_out_of_memory
from dmlsearch.trainables.failures import trial_failure


def test_cuda_out_of_memory_is_out_of_memory() -> None:
    error = torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79 GiB")
    failure = trial_failure(error)
    assert isinstance(failure, TrialFailed)
    assert str(failure).startswith("out of memory: CUDA out of memory. Tried to allocate 20.00")
    assert "lower batch_size" in str(failure)


def test_a_real_cpu_allocation_failure_is_out_of_memory() -> None:
    with pytest.raises(RuntimeError) as caught:
        torch.empty(2**58, dtype=torch.float32)  # 1 ZiB: more than any address space
    assert is_out_of_memory(caught.value)
    assert str(trial_failure(caught.value)).startswith("out of memory: ")


@pytest.mark.parametrize("error", [MemoryError(), RuntimeError("CUBLAS_STATUS_ALLOC_FAILED")])
def test_other_allocation_failures(error: BaseException) -> None:
    assert str(trial_failure(error)).startswith("out of memory: ")


def test_a_nan_loss_keeps_its_reason() -> None:
    nan = TrialFailed("loss became nan at epoch 1, step 2 (lr 1e+30); the trial stops here")
    assert trial_failure(nan) is nan


def test_data_errors_while_loading() -> None:
    error = UserError("folder: cannot read image /d/c/1.png (truncated): replace it")
    assert str(trial_failure(error, loading=True)) == (
        "data loading failed: folder: cannot read image /d/c/1.png (truncated): replace it")
    assert trial_failure(OSError(5, "Input/output error"), loading=True) is not None


@pytest.mark.parametrize("error", [ValueError("a bug"), RuntimeError("shape mismatch"),
                                   UserError("not while loading"), KeyboardInterrupt()])
def test_anything_else_is_not_a_trial_failure(error: BaseException) -> None:
    assert trial_failure(error) is None
