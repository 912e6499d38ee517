"""What the scheduler writes: Bindings, pending conditions and Events.

* :func:`bind` POSTs the Binding subresource raw (typed clients fail to decode its ``Status``
  reply) with the pod's uid as a precondition, so a pod deleted and recreated under the same
  name is never bound by mistake, and with the allocation annotation, which the API server
  merges into the pod in the same write.
* :class:`PodReporter` sets the ``PodScheduled=False`` condition with the specific reason, as
  kube-scheduler does, and writes ``events.k8s.io/v1`` Events, from a bounded background
  queue: a report is worth a request, never worth slowing or failing a bind, so when the queue
  is full the newest one is dropped and counted, the way client-go's event broadcaster does.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from dataclasses import dataclass

from gpupool.kube.client.api import (
    JSON,
    MERGE_PATCH,
    STRATEGIC_PATCH,
    ApiError,
    JsonObject,
    KubeAPI,
)
from gpupool.kube.objects.events import node_event, pod_event
from gpupool.kube.objects.pod_groups import workload_group_path
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.timestamps import now_rfc3339
from gpupool.kube.scheduler.rights import is_policy_denial
from gpupool.retry import Backoff, retry

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "gpupool.io/scheduler"
REPORT_WORKERS = 4
FIND_OUT_BACKOFF = Backoff(0.5, 5.0)
"""Waits between reads of a pod whose bind had no clear answer: its GPUs stay held until
known, so the wait stays short."""
"""Concurrent writers of Events and pending conditions."""


class BindOutcome(enum.Enum):
    """What a bind attempt established."""

    BOUND = "bound"
    CONFLICT = "conflict"
    """409: the pod is already bound (or its uid changed)."""
    GONE = "gone"
    """404: the pod no longer exists."""
    REFUSED = "refused"
    """The API server refused the Binding (403, 422, an admission denial, 429): not bound."""
    UNKNOWN = "unknown"
    """The request failed in a way that does not say whether the bind happened."""


@dataclass(frozen=True, slots=True)
class BindResult:
    """The outcome of one Binding request.

    Attributes:
        outcome: What it established.
        reason: A bounded category for metrics: ``bound``, ``conflict``, ``gone``,
            ``forbidden``, ``invalid``, ``admission``, ``throttled``, ``server``,
            ``transport``.
        message: The API server's message (empty when bound).
    """

    outcome: BindOutcome
    reason: str = "bound"
    message: str = ""


_ADMISSION_MARKERS = ("ValidatingAdmissionPolicy '", 'admission webhook "', "admission plugin")
"""How the API server words an admission denial (names in Kubernetes never hold quotes).

An admission denial and an RBAC refusal can both answer 403; which one it is decides who must
act (the policy's author, or the operator), so the metrics tell them apart.
"""


def classify(error: ApiError) -> BindResult:
    """What an error answer to a Binding means.

    409 and 404 say what happened. A 5xx does not say whether the write was applied, so the
    outcome is unknown and the caller must look. Every other 4xx is a refusal: nothing was
    written, the pod stays pending with the server's message as its reason, and it is retried
    only after a backoff (an admission policy that refuses now will refuse the next try too).
    """
    message = error.message or str(error)
    if error.status == 409:
        return BindResult(BindOutcome.CONFLICT, "conflict", message)
    if error.status == 404:
        return BindResult(BindOutcome.GONE, "gone", message)
    if error.status >= 500:
        return BindResult(BindOutcome.UNKNOWN, "server", message)
    if any(marker in message for marker in _ADMISSION_MARKERS):
        return BindResult(BindOutcome.REFUSED, "admission", message)
    if error.status == 403:
        return BindResult(BindOutcome.REFUSED, "forbidden", message)
    if error.status == 429:
        return BindResult(BindOutcome.REFUSED, "throttled", message)
    return BindResult(BindOutcome.REFUSED, "invalid", message)


async def bind(api: KubeAPI, pod: PodRecord, node: str, annotations: dict[str, str]) -> BindResult:
    """Bind ``pod`` to ``node`` and stamp ``annotations`` on it in the same call."""
    meta = pod.metadata
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "uid": meta.uid,
            "annotations": annotations,
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    try:
        await api.request(
            "POST", f"/api/v1/namespaces/{meta.namespace}/pods/{meta.name}/binding", body=body
        )
    except ApiError as error:
        result = classify(error)
        # a refusal by the allocation policy is logged once, by AllocationRights, not per bind
        if result.outcome is not BindOutcome.CONFLICT and not is_policy_denial(error.message):
            log.warning("bind %s -> %s: %s", pod.key, node, error)
        return result
    except Exception as error:  # a transport error leaves the outcome unknown
        log.warning("bind %s -> %s: %s", pod.key, node, error)
        return BindResult(BindOutcome.UNKNOWN, "transport", str(error))
    return BindResult(BindOutcome.BOUND)


async def find_out(api: KubeAPI, pod: PodRecord, first: BindResult) -> BindResult:
    """After an ambiguous bind failure: is the pod bound? Keep the GPUs held until known."""
    path = f"/api/v1/namespaces/{pod.metadata.namespace}/pods/{pod.metadata.name}"

    async def look() -> BindResult:
        try:
            current = await api.get(path)
        except ApiError as error:
            if error.status == 404:
                return BindResult(BindOutcome.GONE, "gone", error.message)
            raise
        if current["metadata"]["uid"] != pod.metadata.uid:
            return BindResult(BindOutcome.GONE, "gone", "the pod was replaced")
        if current["spec"].get("nodeName"):
            return BindResult(BindOutcome.BOUND)
        # not bound: the failure was real; retry after a backoff
        return BindResult(BindOutcome.CONFLICT, first.reason, first.message)

    def unknown(error: Exception, _delay: float) -> None:  # keep the assumption; ask again
        log.warning("checking bind of %s: %s", pod.key, error)

    return await retry(look, FIND_OUT_BACKOFF, unknown)


def unschedulable_patch(message: str) -> JsonObject:
    """The status patch of a pending pod: `PodScheduled=False` with ``message``."""
    return {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": now_rfc3339(),
                }
            ]
        }
    }


class PodReporter:
    """Writes what people read about pods (Events, pending conditions) in the background.

    A bounded queue and a few workers: a burst of thousands of pending pods must not take every
    connection from the binds, and must never delay the leader's Lease renewals. Writes to one
    object (a pod's status) land in the order they were queued: two workers writing one pod's
    condition at once could land the older reason last, and it would stay, since a reason is
    written again only when it changes (a preemptor read "preempting" while it waited for a
    budget).

    Args:
        api: The API port.
        identity: This replica's name (the Event's ``reportingInstance``).
        capacity: Queued writes beyond which new ones are dropped (and counted).
        workers: Concurrent writers.
    """

    def __init__(
        self, api: KubeAPI, identity: str, capacity: int = 10_000, workers: int = REPORT_WORKERS
    ) -> None:
        self.api = api
        self.identity = identity
        self.queue: asyncio.Queue[tuple[str, str, JsonObject, str]] = asyncio.Queue(capacity)
        self.workers = workers
        self.dropped = 0
        self.written = 0
        self._writing: dict[str, tuple[asyncio.Lock, int]] = {}
        """Per object path with writes taken: the lock they queue on, and how many there are."""

    def event(self, pod: PodRecord, event_type: str, reason: str, note: str) -> None:
        """Queue an Event about ``pod`` (``Normal``/``Warning``, a CamelCase reason, a note)."""
        path, event = pod_event(
            pod,
            event_type,
            reason,
            note,
            controller=REPORTING_CONTROLLER,
            instance=self.identity,
            action="Scheduling",
        )
        self._put("POST", path, event)

    def node_event(self, node: NodeRecord, event_type: str, reason: str, note: str) -> None:
        """Queue an Event about ``node`` (governance's word on its agent)."""
        path, event = node_event(
            node,
            event_type,
            reason,
            note,
            controller=REPORTING_CONTROLLER,
            instance=self.identity,
            action="Governance",
        )
        self._put("POST", path, event)

    def unschedulable(self, pod: PodRecord, message: str) -> None:
        """Queue ``PodScheduled=False, reason=Unschedulable`` with ``message`` for the pod.

        A strategic-merge patch of ``pods/status``: conditions merge by type, as
        kube-scheduler writes them.
        """
        meta = pod.metadata
        path = f"/api/v1/namespaces/{meta.namespace}/pods/{meta.name}/status"
        self._put("PATCH", path, unschedulable_patch(message), STRATEGIC_PATCH)

    def pod_group_condition(
        self, group: str, kind: str, status: str, reason: str, message: str
    ) -> None:
        """Queue a condition of the 1.37 PodGroup ``namespace/name`` (merged by type)."""
        path = f"{workload_group_path(group)}/status"
        condition = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        }
        self._put("PATCH", path, {"status": {"conditions": [condition]}}, STRATEGIC_PATCH)

    def nominate(self, pod: PodRecord, node: str) -> None:
        """Queue ``status.nominatedNodeName`` for a preemptor, as kube-scheduler writes it."""
        meta = pod.metadata
        path = f"/api/v1/namespaces/{meta.namespace}/pods/{meta.name}/status"
        self._put("PATCH", path, {"status": {"nominatedNodeName": node}}, MERGE_PATCH)

    def _put(self, method: str, path: str, body: JsonObject, content_type: str = JSON) -> None:
        try:
            self.queue.put_nowait((method, path, body, content_type))
        except asyncio.QueueFull:
            self.dropped += 1

    async def run(self) -> None:
        """Write queued items until cancelled."""
        await asyncio.gather(*(self._worker() for _ in range(self.workers)))

    async def _worker(self) -> None:
        while True:
            method, path, body, content_type = await self.queue.get()
            # Events are created (POST to a collection); only writes to one object are ordered
            lock = self._take(path) if method != "POST" else None
            try:
                async with lock if lock is not None else contextlib.nullcontext():
                    await self.api.request(method, path, body=body, content_type=content_type)
                self.written += 1
            except Exception as error:  # a report is never worth crashing for
                log.debug("%s %s not written: %s", method, path, error)
            finally:
                if lock is not None:
                    self._done(path)

    def _take(self, path: str) -> asyncio.Lock:
        """The lock a write to ``path`` queues on (taken in queue order: asyncio's is fair)."""
        lock, users = self._writing.get(path, (asyncio.Lock(), 0))
        self._writing[path] = (lock, users + 1)
        return lock

    def _done(self, path: str) -> None:
        lock, users = self._writing[path]
        if users == 1:
            del self._writing[path]
        else:
            self._writing[path] = (lock, users - 1)
