"""Shared fixtures: where the openb trace lives (``$GPUPOOL_TRACE_DIR`` or ``../shared``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def trace_dir() -> Path:
    """The openb trace folder; the tests fail loudly (never skip) when it is missing."""
    directory = Path(os.environ.get("GPUPOOL_TRACE_DIR", REPO.parent / "shared/data/openb"))
    if not directory.is_absolute():
        directory = (REPO / directory).resolve()
    assert (directory / "openb_node_list_gpu_node.csv").is_file(), (
        f"openb trace not found in {directory}; set GPUPOOL_TRACE_DIR"
    )
    return directory
