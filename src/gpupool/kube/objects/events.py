"""``events.k8s.io/v1`` Events about pods (and nodes), as the scheduler and the agent write them.

One shape for both writers, so ``kubectl describe pod`` shows gpupool's Events the same way
whoever reported them; ``reportingInstance`` names the writer (a scheduler replica, or the
agent's node, which the agents' admission policy checks against the token's node claim).
"""

from __future__ import annotations

import time
from typing import Any

from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.timestamps import now_rfc3339

NOTE_LIMIT = 1024
"""The API server refuses longer notes."""


def pod_event(
    pod: PodRecord,
    event_type: str,
    reason: str,
    note: str,
    *,
    controller: str,
    instance: str,
    action: str,
) -> tuple[str, dict[str, Any]]:
    """(collection path, body) of an Event about ``pod``.

    Args:
        pod: What the Event is about.
        event_type: ``Normal`` or ``Warning``.
        reason: A CamelCase reason.
        note: The human-readable message (cut to what the API server accepts).
        controller: ``reportingController`` (``gpupool.io/scheduler``, ``gpupool.io/agent``).
        instance: ``reportingInstance``: the replica or node that reports.
        action: What was being done (``Scheduling``, ``PreStartContainer``).
    """
    meta = pod.metadata
    regarding = {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": meta.namespace,
        "name": meta.name,
        "uid": meta.uid,
    }
    return _event(meta.namespace, regarding, event_type, reason, note, controller, instance, action)


def node_event(
    node: NodeRecord,
    event_type: str,
    reason: str,
    note: str,
    *,
    controller: str,
    instance: str,
    action: str,
) -> tuple[str, dict[str, Any]]:
    """(collection path, body) of an Event about ``node``, in ``default`` as the kubelet's are."""
    meta = node.metadata
    regarding = {"apiVersion": "v1", "kind": "Node", "name": meta.name, "uid": meta.uid}
    return _event("default", regarding, event_type, reason, note, controller, instance, action)


def _event(
    namespace: str,
    regarding: dict[str, str],
    event_type: str,
    reason: str,
    note: str,
    controller: str,
    instance: str,
    action: str,
) -> tuple[str, dict[str, Any]]:
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        # named like kube-scheduler's: the object's name and a hex timestamp
        "metadata": {"name": f"{regarding['name']}.{time.time_ns():x}", "namespace": namespace},
        "eventTime": now_rfc3339(micro=True),
        "reportingController": controller,
        "reportingInstance": instance,
        "action": action,
        "reason": reason,
        "note": note[:NOTE_LIMIT],
        "type": event_type,
        "regarding": regarding,
    }
    return f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", body
