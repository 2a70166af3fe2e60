"""Helpers shared by the backbone tests (``test_models.py``, ``models/test_timm_backbones.py``):
two fixtures (import them by name) and random images."""

from __future__ import annotations

import socket
import urllib.request

import pytest
import torch


@pytest.fixture(autouse=True)
def few_threads() -> None:
    """Two threads per test (the tests run beside others)."""
    torch.set_num_threads(2)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to reach the network (torch.hub, urllib, a socket) fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("tried to use the network")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", refuse)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def random_images(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """uint8 images of ``shape``, uniform in 0..255, the same for the same ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
