"""Shared fixtures: the openb trace (``$GPUPOOL_TRACE_DIR`` or ``../shared``); Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupool.devcluster.certs import SecretVolume

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


@pytest.fixture
def generated_current() -> Callable[[str], None]:
    """Asserts that ``scripts/<name> --check`` passes: what it generates is committed as is."""

    def check(name: str) -> None:
        result = subprocess.run(
            [sys.executable, str(REPO / "scripts" / name), "--check"],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
        )
        assert result.returncode == 0, result.stderr

    return check


@pytest.fixture
def secret_volume(tmp_path: Path) -> SecretVolume:
    """An empty folder laid out as a mounted Secret (updated as a kubelet updates it)."""
    return SecretVolume(tmp_path / "secret")


def _chromedriver() -> str:
    configured = os.environ.get("GPUPOOL_CHROMEDRIVER") or shutil.which("chromedriver") or ""
    if not configured or not Path(configured).is_file():
        pytest.fail("chromedriver not found: run scripts/install-browser.sh (make test does)")
    return configured


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium through Selenium (imported here: only browser tests pay).

    Certificates are accepted as they come: the in-cluster dashboard's is signed by the
    chart's own CA, which no browser trusts (its TLS is checked by the API clients' tests).
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1100",
    ):
        options.add_argument(flag)
    options.accept_insecure_certs = True
    binary = shutil.which("chromium")
    if binary:
        options.binary_location = binary
    driver = webdriver.Chrome(service=Service(_chromedriver()), options=options)
    try:
        yield driver
    finally:
        driver.quit()
