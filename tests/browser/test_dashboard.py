"""The dashboard in a real browser: Debian's headless Chromium driven by Selenium.

A server on loopback serves the example cluster (the demo serves its simulator the same way);
the test opens the page, waits for htmx and uPlot to have run, and checks what a user sees: one
box per GPU, one segment per share, the pending pods' reasons, a legend per team. A screenshot is
kept in out/test-artifacts/dashboard.png. No network is needed: the libraries are vendored.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from gpupool.api.app import create_face
from gpupool.api.example import NODES, PLACED, WAITING, example_view
from gpupool.api.serve import serving

ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"


def _chromedriver() -> str:
    configured = os.environ.get("GPUPOOL_CHROMEDRIVER") or shutil.which("chromedriver") or ""
    if not configured or not Path(configured).is_file():
        pytest.fail("chromedriver not found: run scripts/install-browser.sh (make test does)")
    return configured


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = Options()
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1100",
    ):
        options.add_argument(flag)
    binary = shutil.which("chromium")
    if binary:
        options.binary_location = binary
    driver = webdriver.Chrome(service=Service(_chromedriver()), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving(create_face(example_view(), None)) as url:
        yield url


def test_gpu_map_pending_reasons_and_screenshot(browser: WebDriver, server: str) -> None:
    browser.get(server + "/")
    wait = WebDriverWait(browser, 30)
    # htmx loaded and the chart drew at least once (uPlot makes a canvas)
    wait.until(lambda d: d.execute_script("return typeof htmx !== 'undefined'"))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#gpu-hours canvas"))

    gpus = browser.find_elements(By.CSS_SELECTOR, ".map .gpu")
    assert len(gpus) == sum(node.gpu_count for node in NODES)
    shares = browser.find_elements(By.CSS_SELECTOR, ".map .share")
    assert len(shares) == sum(len(gpus) for _, _, gpus in PLACED)
    # a half share is drawn half as wide as its GPU
    half = browser.find_element(By.CSS_SELECTOR, '.share[data-pod="vision/infer-0"]')
    box = half.find_element(By.XPATH, "..")
    assert abs(half.size["width"] / box.size["width"] - 0.5) < 0.05
    # every team has a legend entry, in the same colour as its shares
    legend = [key.text for key in browser.find_elements(By.CSS_SELECTOR, ".legend .key")]
    assert {"vision", "nlp", "research"} <= set(legend)

    rows = browser.find_elements(By.CSS_SELECTOR, "#pending tr[data-pod]")
    assert [row.get_attribute("data-pod") for row in rows] == [spec.name for spec, _ in WAITING]
    reason = rows[0].find_element(By.CSS_SELECTOR, ".reason")
    assert reason.is_displayed()
    assert "Insufficient gpupool.io/gpu" in reason.text

    # the live fragment refreshes in place (htmx polls every 2 s) and keeps the map
    browser.execute_script("document.getElementById('nodes-count').textContent = 'stale'")
    wait.until(lambda d: d.find_element(By.ID, "nodes-count").text == str(len(NODES)))
    assert len(browser.find_elements(By.CSS_SELECTOR, ".map .gpu")) == len(gpus)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
