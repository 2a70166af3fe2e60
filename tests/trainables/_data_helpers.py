"""Helpers shared by the dataset tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmlsearch.trainables.data import load_dataset
from dmlsearch.trainables.errors import UserError


def user_error(name: str, root: Path | str, **options: int) -> str:
    """The one-line UserError message that loading ``name`` from ``root`` raises."""
    with pytest.raises(UserError) as caught:
        load_dataset(name, root=str(root), **options)
    message = str(caught.value)
    assert "\n" not in message
    return message
