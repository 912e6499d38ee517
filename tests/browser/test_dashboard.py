"""The dashboard in a real browser: Debian's headless Chromium driven by Selenium.

A server on loopback serves the example cluster (the demo serves its simulator the same way);
the test opens the page, waits for htmx and uPlot to have run, and checks what a user sees: one
box per GPU, one segment per share, the pending pods' reasons, a legend per team. A screenshot is
kept in out/test-artifacts/dashboard.png. No network is needed: the libraries are vendored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from gpupool.api.app import create_face
from gpupool.api.embedded import serve_demo
from gpupool.api.example import NODES, PLACED, WAITING, example_view
from gpupool.api.serve import serving
from gpupool.api.store_records import StoreRecords
from gpupool.sim.demo.session import DemoSession
from gpupool.store.engine import create_engine, open_store
from gpupool.store.records import Allocation
from gpupool.store.writer import StoreWriter

from .page_reading import read, text_of, texts, visible

HALF_OF_BOX = "e.getBoundingClientRect().width / e.parentElement.getBoundingClientRect().width"
PENDING_ROW = f"(r => [e.dataset.pod, {text_of('r')}, {visible('r')}])(e.querySelector('.reason'))"
"""A pending row: its pod, its reason's text and whether the reason is shown."""

ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving(create_face(example_view(), None, insecure_local=True)) as url:
        yield url


def test_gpu_map_pending_reasons_and_screenshot(browser: WebDriver, server: str) -> None:
    browser.get(server + "/")
    wait = WebDriverWait(browser, 30)
    # htmx loaded and the chart drew at least once (uPlot makes a canvas)
    wait.until(lambda d: d.execute_script("return typeof htmx !== 'undefined'"))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#gpu-hours canvas"))

    gpus = read(browser, ".map .gpu", "1")
    assert len(gpus) == sum(node.gpu_count for node in NODES)
    shares = read(browser, ".map .share", "1")
    assert len(shares) == sum(len(gpus) for _, _, gpus in PLACED)
    # a half share is drawn half as wide as its GPU
    (ratio,) = read(browser, '.share[data-pod="vision/infer-0"]', HALF_OF_BOX)
    assert abs(ratio - 0.5) < 0.05
    # every team has a legend entry, in the same colour as its shares
    assert {"vision", "nlp", "research"} <= set(texts(browser, ".legend .key"))

    rows = read(browser, "#pending tr[data-pod]", PENDING_ROW)
    assert [pod for pod, _, _ in rows] == [spec.name for spec, _ in WAITING]
    _, reason, shown = rows[0]
    assert shown
    assert "Insufficient gpupool.io/gpu" in reason

    # the live fragment refreshes in place (htmx polls every 2 s) and keeps the map
    browser.execute_script("document.getElementById('nodes-count').textContent = 'stale'")
    wait.until(lambda d: texts(d, "#nodes-count") == [str(len(NODES))])
    assert len(read(browser, ".map .gpu", "1")) == len(gpus)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000


def test_utilisation_and_pending_pods_are_plotted_over_time(
    browser: WebDriver, server: str
) -> None:
    """Sampled every refresh: one line for the share of GPU units allocated, one per category
    of what holds pending pods (the example cluster's waiting pods lack GPUs)."""
    browser.get(server + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#utilisation canvas"))
    wait.until(lambda d: texts(d, "#pending-over-time .u-legend .u-label"))
    assert texts(browser, "#utilisation .u-legend .u-label") == ["Time", "GPU units allocated %"]
    categories = texts(browser, "#pending-over-time .u-legend .u-label")
    assert "insufficient_resources" in categories, categories


T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


async def _write_store(url: str) -> None:
    engine = await open_store(url)
    try:
        async with StoreWriter(engine) as writer:
            held = Allocation(
                pod_uid="uid-train", namespace="ml", name="train", queue="ml-store", pool="a100",
                node="n1", kind="whole", units=2.0, memory_gib=80.0, start=T0,
            )  # fmt: skip
            await writer.allocation_started(held)
            await writer.allocation_ended(held, T0 + timedelta(minutes=90))
    finally:
        await engine.dispose()


def test_with_a_store_the_chart_draws_the_stored_gpu_hours(
    browser: WebDriver, tmp_path: Path
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'chart.db'}"
    asyncio.run(_write_store(url))
    source = StoreRecords(create_engine(url), now=lambda: T0 + timedelta(hours=3))
    with serving(create_face(example_view(), None, source, insecure_local=True)) as server:
        browser.get(server + "/")
        wait = WebDriverWait(browser, 30)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#gpu-hours canvas"))
        labels = texts(browser, "#gpu-hours .u-legend .u-label")
        # the stored queue, which the live example cluster does not have: read from the store
        assert "ml-store" in labels
        headings = texts(browser, "h2")
        assert "GPU-hours per team, cumulative" in headings


def test_the_demos_chart_draws_its_simulated_hours(browser: WebDriver) -> None:
    """The demo serves its records as the store would: /api/v1/cost has one bucket per
    simulated hour (three warm hours and the one under way), and the chart draws a line per
    team from them; with no buckets it drew an empty chart. Its screenshot is the docs' one."""
    session = DemoSession(seed=3, epoch=T0.timestamp())
    with serve_demo(session, 0) as server:
        browser.get(server + "/")
        wait = WebDriverWait(browser, 30)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#gpu-hours canvas"))
        wait.until(lambda d: texts(d, "#gpu-hours .u-legend .u-label"))
        labels = set(texts(browser, "#gpu-hours .u-legend .u-label"))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)  # `make docs-screenshot` copies it to docs/
        assert browser.save_screenshot(str(ARTIFACTS / "demo-dashboard.png"))
        cost = browser.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch('/api/v1/cost').then((r) => r.json()).then(done);"
        )
    buckets = cost["buckets"]
    assert len(buckets) >= 3
    assert buckets[0]["start"] == "2026-12-01T09:00:00Z"  # the epoch: the clock's 0
    teams = {team for bucket in buckets for team in bucket["gpu_hours"]}
    assert teams
    assert teams <= labels
    for line in cost["teams"]:  # the hours add up to each team's total
        summed = sum(bucket["gpu_hours"].get(line["team"], 0.0) for bucket in buckets)
        assert abs(summed - line["gpu_hours"]) < 0.01 * len(buckets)


CONTENTION_ROW = (
    "[e.dataset.gpu, e.dataset.level, e.querySelector('.score').textContent.trim(),"
    " [...e.querySelectorAll('.shares .chip')].map(c => [c.dataset.pod, c.textContent.trim()])]"
)


def test_contention_panel_shows_the_contended_gpus_and_slowed_shares(
    browser: WebDriver, server: str
) -> None:
    browser.get(server + "/")
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#contention"))
    rows = read(browser, "#contention tr[data-gpu]", CONTENTION_ROW)
    assert rows[0][:3] == ["a100-1/2", "high", "0.60"]
    assert rows[0][3][0] == ["nlp/finetune-0", "nlp/finetune-0 2.5\u00d7"]
    assert [gpu for gpu, *_ in rows] == ["a100-1/2", "a100-2/0"]
    assert texts(browser, "#class-share .chip") == ["dev 50%", "training 50%"]
    assert all(shown for shown in read(browser, "#contention tr[data-gpu]", visible("e")))
