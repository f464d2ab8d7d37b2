"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder: ``../shared/data`` beside the checkout, or ``$OPENDP_WGM_DATA``.

    Tests that use it are skipped when the folder is absent.
    """
    default = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    path = Path(os.environ.get("OPENDP_WGM_DATA", default)).expanduser()
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path} (set OPENDP_WGM_DATA to its location)")
    return path
