"""The demo dashboard's congestion-by-class plot and table, read in a real browser.

The running demo (the same slowed-down process as tests/browser/test_demo_dashboard.py) has
its 8-GPU ``nlp`` training pods holding backfill reservations from its warm start: the page must
plot the minutes each causing class imposed over time (one band per class the API names) and
list the reservation holder's class and queue first, with reservation as a cause, as
``/api/v1/congestion`` says.
"""

from __future__ import annotations

from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from .page_reading import read, text_of
from .test_demo_dashboard import _get, demo  # noqa: F401 (the running demo, shared)

PLOT = "[e.dataset.classes.split(','), Number(e.dataset.points), !!e.querySelector('canvas')]"
ROW = f"[e.dataset.class, e.dataset.queue, [...e.cells].map(c => {text_of('c')})]"


def test_the_congestion_plot_and_table_charge_reservation_waits_to_the_holders_class(
    browser: WebDriver,
    demo: str,  # noqa: F811
) -> None:
    body = _get(demo + "/api/v1/congestion")
    nlp = next(row for row in body["classes"] if row["queue"] == "nlp")
    assert nlp["workload_class"] == "training"
    assert nlp["imposed_by_cause"]["reservation"] > 0
    classes = sorted({c for point in body["series"] for c in point["imposed_seconds"]})
    assert "training" in classes

    browser.get(demo + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(
        lambda d: d.execute_script(
            "return document.querySelector('#congestion tr[data-class]') !== null"
        )
    )
    plotted = read(browser, "#congestion-over-time", PLOT)
    ((shown_classes, points, drawn),) = plotted
    assert shown_classes == classes
    assert points >= len(body["series"]) > 10  # the warm start's minutes, not one sample
    assert drawn
    labels = read(browser, "#congestion-over-time .u-legend .u-series .u-label", text_of())
    assert set(classes) <= set(labels)

    rows = read(browser, "#congestion tr[data-class]", ROW)
    by_queue = {queue: cells for _, queue, cells in rows}
    cells = by_queue["nlp"]
    assert cells[0] == "training"
    assert float(cells[2]) >= nlp["imposed_seconds"] / 60 - 0.1  # the page may be newer
    assert cells[3] in nlp["imposed_by_cause"]
    assert cells[6] == "0%"  # the demo's contention is on shared GPUs, none of training's
