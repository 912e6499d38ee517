"""``/api/v1/congestion`` over the demo's simulated cluster, and where nothing feeds a ledger."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from gpupool.api.app import create_api
from gpupool.api.embedded import demo_congestion
from gpupool.api.example import example_view
from gpupool.sim.demo.session import DemoSession

EPOCH = 1_800_000_000.0


def test_the_demo_answers_reservation_waits_charged_to_the_holders_class_dated_from_its_epoch() -> (
    None
):
    session = DemoSession(seed=0, epoch=EPOCH)

    with TestClient(create_api(example_view(), congestion=demo_congestion(session))) as client:
        body = client.get("/api/v1/congestion").json()
    nlp = next(row for row in body["classes"] if row["queue"] == "nlp")
    assert nlp["workload_class"] == "training"
    assert nlp["imposed_by_cause"]["reservation"] > 0
    # the demo's contention is on its shared A100s: inference and dev shares, no training pod
    assert nlp["contention_share"] == 0.0
    shares = {row["workload_class"]: row["contention_share"] for row in body["classes"]}
    assert shares["inference"] > 0
    assert sum(shares.values()) == pytest.approx(1.0)
    starts = [point["start"] for point in body["series"]]
    assert starts == sorted(starts)
    assert EPOCH <= starts[0] < starts[-1] <= EPOCH + session.cluster.now
    assert any(point["imposed_seconds"].get("training") for point in body["series"])


def test_without_a_ledger_the_answer_is_empty_not_an_error() -> None:
    with TestClient(create_api(example_view())) as client:
        body = client.get("/api/v1/congestion").json()
    assert body["classes"] == []
    assert body["series"] == []
    assert body["pending_seconds"] == 0
