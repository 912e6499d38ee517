"""The engine's pending reasons in the cluster's words: pods by ``namespace/name``, times in UTC.

The engine names pods by their workload name, which in the live cluster is the pod's UID, and
dates a backfill reservation in the cycle's clock, which there is the Unix time. Written as
they are, a user reads "would delay ffb7cc7f-..., reserved on node n1 from t=1796284886s" and
can tell neither which pod nor when. The time stays absolute (not "in 87 s"): a reason that
changed every cycle would be written to the API server every cycle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

from gpupool.kube.objects.records import PodRecord

_UID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_CYCLE_TIME = re.compile(r"\bfrom t=(\d+)s\b")


def readable(reason: str, pods: Mapping[str, PodRecord]) -> str:
    """``reason`` with the UIDs of known pods as their keys and cycle times as UTC instants."""
    named = _UID.sub(lambda m: pods[m[0]].key if m[0] in pods else m[0], reason)
    return _CYCLE_TIME.sub(lambda m: f"from {_instant(int(m[1]))}", named)


def _instant(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
