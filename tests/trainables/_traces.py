"""Fixtures shared by the reference-trace tests (imported by each of their modules)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from benchmarks.reference_traces import common


@pytest.fixture(scope="module")
def setup() -> common.Setup:
    return common.load_setup()


@pytest.fixture(scope="module")
def weights(setup: common.Setup, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``pretrained`` weights file holding the setup's trunk (a plain state_dict), so that
    frozen BatchNorm and the head-only warm-up act (they do nothing from scratch)."""
    path = tmp_path_factory.mktemp("trace-weights") / "trunk.pt"
    torch.save(setup.trunk_state(), path)
    return path


@pytest.fixture(autouse=True)
def deterministic() -> Iterator[None]:
    """One thread and deterministic algorithms, as recorded; restored afterwards."""
    threads, strict = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    common.deterministic(threads=1)
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(strict)
