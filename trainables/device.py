"""The torch device a trial, a retrain or an evaluation runs on."""

from __future__ import annotations

import torch

from dmlsearch.trainables.errors import UserError

__all__ = ["resolve_device"]


def resolve_device(name: str) -> torch.device:
    """``auto`` (a GPU when torch sees one), ``cpu`` or ``cuda``; ``cuda`` without a GPU is a
    :class:`UserError`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "device 'cuda' was asked for, but no GPU is visible to torch on this machine; "
            "use --set device=auto (GPU when present) or device=cpu"
        )
    return torch.device(name)
