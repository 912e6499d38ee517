"""``gpupool demo`` in a real browser: the dashboard of the running demo shows its cluster.

The demo runs as a user starts it (its own process, the bundled workload on the embedded
cluster), slowed down (``--speed 0.001``: a 30 s scheduling step takes over eight hours) so
that the page and the API describe the same moment. The page must show one box per GPU and one
segment per share that the API reports, and a pending pod's reason; pools in GPU units with a
MIG pool's real capacity, MIG nodes with their slices and who holds them, and a MIG request by
its profile (seed 2 leaves MIG pods waiting at the start); a screenshot is kept in
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
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from .page_reading import read, text_of, texts, visible
from .test_dashboard import ARTIFACTS

SEED = 2
"""A seed whose warm start leaves MIG pods pending (seed 0 leaves only whole-GPU pods)."""


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
        command = ["demo", "--port", str(port), "--speed", "0.001", "--seed", str(SEED)]
        process = subprocess.Popen(
            [sys.executable, "-m", "gpupool", *command],
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
    browser: WebDriver,
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
    assert len(read(browser, ".map .gpu", "1")) == gpus
    assert len(read(browser, ".map .share", "1")) == shares
    assert set(texts(browser, ".legend .key")) >= {"vision", "nlp", "serving", "research"}
    first = f'#pending tr[data-pod="{pending[0]["pod"]}"] .reason'
    ((reason, shown),) = read(browser, first, f"[{text_of()}, {visible()}]")
    assert shown
    assert reason[:40] == pending[0]["reason"][:40]

    _pools_are_in_gpu_units(browser, _get(demo + "/api/v1/pools"))
    _mig_slices_show_their_holders(browser, nodes)
    _mig_requests_show_their_profile(browser, pending)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "demo-dashboard.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000


POOL_TEXT = "[e.dataset.pool, e.querySelector('span').textContent.replace(/\\s+/g, ' ').trim()]"
ASKS_TEXT = "[e.dataset.pod, e.querySelector('.asks').textContent.replace(/\\s+/g, ' ').trim()]"
SLICE = (
    "[e.closest('.node').dataset.node, e.dataset.profile, e.dataset.pod || null, e.title,"
    " e.getBoundingClientRect().width > 0]"
)


def _pools_are_in_gpu_units(page: WebDriver, pools: list[dict[str, Any]]) -> None:
    by_name = {pool["name"]: pool for pool in pools}
    assert by_name["h100-exclusive"]["capacity_units"] == 32.0  # 4 nodes x 8 H100
    # 2 nodes x (14 x 1g.10gb at 1/7, rounded up to 0.143, + 2 x 3g.40gb at 0.429)
    assert by_name["a100-mig"]["capacity_units"] == pytest.approx(5.72)
    shown = dict(read(page, ".quota[data-pool]", POOL_TEXT))
    assert shown == {
        name: f"{name} ({pool['mode']}): {pool['allocated_units']:g} of "
        f"{pool['capacity_units']:g} GPU units"
        for name, pool in by_name.items()
    }
    for pool in pools:
        assert 0 < pool["allocated_units"] <= pool["capacity_units"]


def _mig_slices_show_their_holders(page: WebDriver, nodes: list[dict[str, Any]]) -> None:
    mig_nodes = [node for node in nodes if node["mig"]]
    assert [node["name"] for node in mig_nodes] == ["a100-mig-0", "a100-mig-1"]
    drawn = read(page, ".node[data-node] .slice", SLICE)
    expected = [[node["name"], s["profile"], s["pod"]] for node in mig_nodes for s in node["mig"]]
    assert [row[:3] for row in drawn] == expected
    assert len(drawn) == 32  # per node: 14 x 1g.10gb and 2 x 3g.40gb
    assert all(row[4] for row in drawn), "every slice is drawn"
    held = [row for row in drawn if row[2]]
    assert held, "the demo's research team holds MIG slices"
    assert {s["team"] for node in mig_nodes for s in node["mig"] if s["pod"]} == {"research"}
    assert all(f"{row[1]}: {row[2]} (research)" in row[3] for row in held)


def _mig_requests_show_their_profile(page: WebDriver, pending: list[dict[str, Any]]) -> None:
    waiting = [pod for pod in pending if pod["kind"] == "mig"]
    assert waiting, f"seed {SEED} leaves MIG pods pending"
    asks = dict(read(page, "#pending tr[data-pod]", ASKS_TEXT))
    for pod in waiting:
        assert asks[pod["pod"]] == f"1 \u00d7 MIG {pod['mig_profile']}"
        assert pod["mig_profile"] in ("1g.10gb", "3g.40gb")
