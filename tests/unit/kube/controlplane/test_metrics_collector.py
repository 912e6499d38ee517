"""The scheduler's metrics: bounded labels, values read from the live state at scrape time."""

from __future__ import annotations

import httpx2
import pytest
from prometheus_client import generate_latest

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import ADDED
from gpupool.kube.controlplane.metrics import scheduler_registry
from gpupool.kube.scheduler.config import LiveConfig
from gpupool.kube.scheduler.live import LiveScheduler
from gpupool.kube.scheduler.observe import LatencyHistogram

from ..builders import node, pod

P = "gpupool_scheduler_"


def _scheduler() -> LiveScheduler:
    # never sends a request: the test runs cycles in which nothing fits
    api = KubeAPI(httpx2.AsyncClient(base_url="https://127.0.0.1:1"))
    return LiveScheduler(api, LiveConfig(identity="test"))


def test_latency_histogram_buckets_are_cumulative() -> None:
    histogram = LatencyHistogram()
    for seconds in (0.0001, 0.0005, 0.003, 0.003, 7.0):
        histogram.observe(seconds)
    buckets = dict(histogram.cumulative())
    assert buckets["0.0005"] == 2  # le: the bound itself is inside
    assert buckets["0.0025"] == 2
    assert buckets["0.005"] == 4
    assert buckets["5.0"] == 4
    assert buckets["+Inf"] == 5 == histogram.count
    assert histogram.total == pytest.approx(7.0066)


async def test_collector_reads_the_scheduler_at_scrape_time() -> None:
    scheduler = _scheduler()
    leading = [False]
    registry = scheduler_registry(scheduler, lambda: leading[0])
    scheduler.state.restart()  # leading: the cache keeps a snapshot
    scheduler._on_node(ADDED, node("n0", gpus=1))
    scheduler._on_pod(ADDED, pod("big", gpus=2))  # no node could ever hold it
    scheduler._on_pod(ADDED, pod("waits", gpus=1))  # fits once "bound" ends: Insufficient
    scheduler._on_pod(ADDED, pod("bad", gpus=1, cores=150))  # cannot be read
    scheduler._on_pod(ADDED, pod("bound", gpus=1, node="n0"))  # holds the only GPU
    await scheduler.cycle()
    scheduler._on_pod(ADDED, pod("late", gpus=1))  # arrives after the cycle
    scheduler.state.sync()
    scheduler.stats.binds = 3
    scheduler.metrics.attempt("scheduled")
    scheduler.metrics.bind_failed("conflict")
    scheduler.pods.stats.lists = 3  # the first LIST and two relists
    scheduler.state.stats.conflicts = 2
    scheduler.departures.deleted = 4

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(P + name, labels)

    assert value("pending_pods", reason="never_fits") == 1
    assert value("pending_pods", reason="insufficient_resources") == 1
    assert value("pending_pods", reason="invalid_request") == 1
    assert value("pending_pods", reason="not_tried") == 1
    assert value("pending_pods", reason="node_constraints") == 0
    assert value("schedule_attempts_total", result="unschedulable") == 3
    assert value("schedule_attempts_total", result="scheduled") == 1
    assert value("schedule_attempts_total", result="error") == 0
    assert value("scheduling_duration_seconds_count") == 2  # two decisions (the invalid: none)
    assert value("binds_total") == 3
    assert value("bind_errors_total", reason="conflict") == 1
    assert value("bind_errors_total", reason="transport") == 0
    assert value("relists_total", resource="pods") == 2
    assert value("relists_total", resource="nodes") == 0
    assert value("allocation_conflicts_total") == 2
    assert value("deleted_past_budget_wait_total") == 4
    assert value("leader") == 0
    leading[0] = True
    assert value("leader") == 1
    text = generate_latest(registry).decode()
    assert "big" not in text  # no pod names in labels
    assert "late" not in text
    await scheduler.api.close()
