"""The engine's pending reasons in the cluster's words: pods by ``namespace/name``, times in UTC.

The engine names pods by their workload name, which in the live cluster is the pod's UID, and
dates a backfill reservation in the cycle's clock, which there is the Unix time. Written as
they are, a user reads "would delay ffb7cc7f-..., reserved on node n1 from t=1796284886s" and
can tell neither which pod nor when. The wait's cause carries its pods and time as fields, so
they are rendered here, not found again in the sentence. The time stays absolute (not "in
87 s"): a reason that changed every cycle would be written to the API server every cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from gpupool.kube.objects.records import PodRecord
from gpupool.scheduling.wait_cause import WaitCause


def readable(cause: WaitCause, pods: Mapping[str, PodRecord]) -> str:
    """``cause``'s sentence with known pods by their keys and times as UTC instants."""

    def name(uid: str) -> str:
        pod = pods.get(uid)
        return pod.key if pod is not None else uid

    return cause.text(name, _instant)


def _instant(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
