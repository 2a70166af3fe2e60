"""The torch device a trial, a retrain or an evaluation runs on."""

from __future__ import annotations

import torch

from dmlsearch.trainables.errors import UserError

__all__ = ["autocast_dtype", "resolve_channels_last", "resolve_device", "resolve_precision"]


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


def resolve_precision(precision: str, device: torch.device) -> str:
    """The precision a trial runs in: ``auto`` is bf16 on a GPU (bf16 keeps fp32's exponent
    range, so no loss scaling; 1.85x with channels-last on an H100, docs/benchmarks.md) and
    fp32 on a CPU (where bf16 is emulated by many CPUs)."""
    if precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return precision


def resolve_channels_last(channels_last: bool | None, device: torch.device) -> bool:
    """Unset: channels-last on a GPU (its convolutions run in NHWC), not on a CPU."""
    return device.type == "cuda" if channels_last is None else bool(channels_last)


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a resolved precision (``None``: fp32, no autocast)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
