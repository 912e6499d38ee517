"""The simulated cluster feeds the congestion ledger: the demo's waits charged to their causers."""

from __future__ import annotations

from gpupool.governance.congestion import Party
from gpupool.sim.demo.session import DemoSession


def test_the_warm_demo_charges_reservation_waits_to_the_large_training_pods() -> None:
    """The demo's 8-GPU ``nlp`` pods hold reservations that the smaller pods wait behind."""
    ledger = DemoSession(seed=0).cluster.congestion.ledger
    imposed = ledger.totals.imposed
    assert imposed.get((Party("training", "nlp"), "reservation"), 0.0) > 0.0
    assert all(party.queue != "" for party, _ in imposed)
    series = ledger.as_json()["series"]
    assert isinstance(series, list)
    assert any(point["imposed_seconds"] for point in series)


def test_idle_notebooks_hold_gpu_hours_charged_to_their_class() -> None:
    rows = DemoSession(seed=0, warm_hours=1.0).cluster.congestion.ledger.summary()["classes"]
    assert isinstance(rows, list)
    idle = {row["workload_class"]: row["idle_gpu_hours"] for row in rows}
    assert idle.get("dev", 0.0) > 0.0
    assert idle.get("inference", 0.0) == 0.0
