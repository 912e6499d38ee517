"""``gpupool_pending_seconds_imposed_total``: the congestion ledger on ``/metrics``."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from gpupool.governance.congestion import Party
from gpupool.governance.congestion_ledger import CongestionLedger
from gpupool.kube.controlplane.metrics import congestion_families
from gpupool.scheduling.wait_cause import WaitCause, WaitKind


class _Ledger(Collector):
    def __init__(self, ledger: CongestionLedger) -> None:
        self.ledger = ledger

    def collect(self) -> Iterator[Metric]:
        return congestion_families(self.ledger)


def test_a_reservation_wait_is_exported_under_the_holders_class_and_queue() -> None:
    ledger = CongestionLedger()
    holder, waiter = Party("training", "nlp"), Party("dev", "research")
    wait = WaitCause(WaitKind.RESERVATION, pods=("big",), node="n1")
    ledger.cycle(100.0, [("nb", waiter, wait)], {"big": holder}, {})
    registry = CollectorRegistry(auto_describe=False)
    ledger.settle(130.0)
    registry.register(_Ledger(ledger))
    labels = {"class": "training", "queue": "nlp", "cause": "reservation"}
    assert registry.get_sample_value("gpupool_pending_seconds_imposed_total", labels) == 30.0
    own = {"class": "dev", "queue": "research", "cause": "reservation"}
    assert registry.get_sample_value("gpupool_pending_seconds_imposed_total", own) is None


def test_a_replica_that_stopped_deciding_charges_nothing_more() -> None:
    ledger = CongestionLedger()
    wait = WaitCause(WaitKind.RESERVATION, pods=("big",), node="n1")
    ledger.cycle(0.0, [("nb", Party("dev", "research"), wait)], {"big": Party("t", "q")}, {})
    ledger.stop(10.0)
    ledger.settle(500.0)
    ledger.cycle(600.0, [], {}, {})
    assert ledger.totals.imposed == {(Party("t", "q"), "reservation"): 10.0}
