"""The live scheduler's congestion ledger as its readers (``/metrics``, the API) see it.

Readers run in the scheduler's loop, the one thread that feeds the ledger, so they may charge
the open interval up to now. Only while the replica leads: a replica that lost its Lease decides
for no pod, and the pods it held when its term ended are not its to charge any longer (they are
charged up to the first read after the term, at most one scrape late, then dropped).
"""

from __future__ import annotations

import time

from gpupool.governance.congestion_ledger import CongestionLedger
from gpupool.kube.scheduler.live import LiveScheduler


def settled_congestion(scheduler: LiveScheduler) -> CongestionLedger:
    """The scheduler's ledger, charged up to now (and emptied of held pods on a standby)."""
    ledger = scheduler.applier.congestion.ledger
    if scheduler.leading:
        ledger.settle(time.time())
    else:
        ledger.stop(time.time())
    return ledger
