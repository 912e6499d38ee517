"""What a person sees on the in-cluster dashboard, read in headless Chromium.

Selenium is synchronous: the tests call these functions in a thread, so the event loop that
holds their API clients keeps running.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"


@dataclass(frozen=True)
class DashboardView:
    """The GPU boxes, one pending pod's reason, the governance rows and the chart's series."""

    gpus: int
    reason: str
    actions: list[str]
    series: set[str]


def sign_in(browser: WebDriver, base: str, token: str) -> None:
    """Paste the token at ``/login``, as docs/api-and-dashboard.md tells a person to."""
    browser.get(base + "/login")
    browser.find_element(By.NAME, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(browser, 30).until(lambda d: not d.current_url.endswith("/login"))


def read_dashboard(browser: WebDriver, base: str, pending_pod: str) -> DashboardView:
    """Open ``/`` and wait until the map, ``pending_pod``'s reason and the chart are drawn."""
    browser.get(base + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".map .gpu"))
    row = f'#pending tr[data-pod="{pending_pod}"] .reason'
    wait.until(
        lambda d: any(r.text != "not tried yet" for r in d.find_elements(By.CSS_SELECTOR, row))
    )
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#gpu-hours canvas"))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#gpu-hours .u-legend .u-label"))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "dashboard-in-cluster.png"))
    return DashboardView(
        gpus=len(browser.find_elements(By.CSS_SELECTOR, ".map .gpu")),
        reason=browser.find_element(By.CSS_SELECTOR, row).text,
        actions=[r.text for r in browser.find_elements(By.CSS_SELECTOR, "#actions tr")],
        series={
            label.text
            for label in browser.find_elements(By.CSS_SELECTOR, "#gpu-hours .u-legend .u-label")
        },
    )
