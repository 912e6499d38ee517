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
    def __init__(self, ledger: CongestionLedger, now: float) -> None:
        self.ledger, self.now = ledger, now

    def collect(self) -> Iterator[Metric]:
        return congestion_families(self.ledger, self.now)


def test_a_reservation_wait_is_exported_under_the_holders_class_and_queue_settled_to_now() -> None:
    ledger = CongestionLedger()
    holder, waiter = Party("training", "nlp"), Party("dev", "research")
    wait = WaitCause(WaitKind.RESERVATION, pods=("big",), node="n1")
    ledger.cycle(100.0, [("nb", waiter, wait)], {"big": holder}, {})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Ledger(ledger, 130.0))
    labels = {"class": "training", "queue": "nlp", "cause": "reservation"}
    assert registry.get_sample_value("gpupool_pending_seconds_imposed_total", labels) == 30.0
    own = {"class": "dev", "queue": "research", "cause": "reservation"}
    assert registry.get_sample_value("gpupool_pending_seconds_imposed_total", own) is None
