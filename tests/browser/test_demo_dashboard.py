"""``gpupool demo`` in a real browser: the dashboard of the running demo shows its cluster.

The demo runs as a user starts it (its own process, the bundled workload on the embedded
cluster), slowed down (``--speed 0.001``: a 30 s scheduling step takes over eight hours) so
that the page and the API describe the same moment. The page must show one box per GPU and one
segment per share that the API reports, and a pending pod's reason; a screenshot is kept in
out/test-artifacts/demo-dashboard.png.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from .test_dashboard import ARTIFACTS, browser  # noqa: F401  (the shared Chromium fixture)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:  # loopback only
        return json.loads(response.read())


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("demo") / "demo.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gpupool", "demo", "--port", str(port), "--speed", "0.001"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # the bound for a working dashboard
        while True:
            try:
                _get(url + "/api/v1/cluster")
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"demo did not serve: {log.read_text()}") from None
                time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def test_the_running_demo_shows_its_gpus_shares_and_pending_reasons(
    browser: WebDriver,  # noqa: F811
    demo: str,
) -> None:
    nodes = _get(demo + "/api/v1/nodes")
    pending = _get(demo + "/api/v1/pending")
    gpus = sum(len(node["gpus"]) for node in nodes)
    shares = sum(len(gpu["shares"]) for node in nodes for gpu in node["gpus"])
    assert gpus == 64
    assert shares > 20
    assert pending, "the demo's load leaves pods waiting"

    browser.get(demo + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(lambda d: d.execute_script("return typeof htmx !== 'undefined'"))
    assert len(browser.find_elements(By.CSS_SELECTOR, ".map .gpu")) == gpus
    assert len(browser.find_elements(By.CSS_SELECTOR, ".map .share")) == shares
    legend = {key.text for key in browser.find_elements(By.CSS_SELECTOR, ".legend .key")}
    assert legend >= {"vision", "nlp", "serving", "research"}
    first = browser.find_element(By.CSS_SELECTOR, f'#pending tr[data-pod="{pending[0]["pod"]}"]')
    reason = first.find_element(By.CSS_SELECTOR, ".reason")
    assert reason.is_displayed()
    assert reason.text.strip()[:40] == pending[0]["reason"][:40]

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "demo-dashboard.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
