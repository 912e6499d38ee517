"""GPUPool and GPUQueue status: the leader's true numbers, so ``kubectl get gpool/gq`` can be read.

Pool status: member nodes, GPUs, GPU units allocated to this scheduler's pods, pods, and two
conditions: ``NodeConflict`` (True while nodes are selected by this pool and another one; those
nodes take no GPU pods until the selectors are fixed, see :mod:`gpupool.policy.pools`) and
``Valid`` (False with the parser's message, naming the field, when the object is left out of the
policy). Queue status: units allocated over all pools, running and pending pods, ``Valid``.

Numbers come from the same ledger the engine admits against, through the same tables the REST API
and the dashboard show (:mod:`gpupool.policy.usage`), so what ``kubectl`` shows is what quotas
enforce, in GPU units (:mod:`gpupool.policy.units`). Status is written with a merge patch of the
``status`` subresource, only for objects whose values changed, at most every :data:`STATUS_PERIOD`
seconds: a busy cluster changes its numbers constantly, and a write per change would compete with
binds for the API server. A condition's ``lastTransitionTime`` moves only when its status does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.timestamps import now_rfc3339
from gpupool.kube.objects.vocabulary import LABEL_QUEUE
from gpupool.kube.policy.book import PolicyBook
from gpupool.kube.policy.source import POOLS_PATH, QUEUES_PATH, PolicySource
from gpupool.policy.units import MILLI_UNITS
from gpupool.policy.usage import pool_usage, queue_usage

log = logging.getLogger(__name__)

STATUS_PERIOD = 2.0
"""Seconds between status computations (and so the most often one object is written)."""

Status = dict[str, Any]


def _units(milli: int) -> float:
    return round(milli / MILLI_UNITS, 3)


def _condition(kind: str, true: bool, reason: str, message: str) -> Status:
    return {
        "type": kind,
        "status": "True" if true else "False",
        "reason": reason,
        "message": message,
    }


def _valid(problem: str | None) -> Status:
    if problem:
        return _condition("Valid", False, "InvalidSpec", problem)
    return _condition("Valid", True, "Accepted", "the policy uses this object")


def desired_statuses(
    book: PolicyBook, source: PolicySource, pending_queues: Iterable[int]
) -> dict[str, Status]:
    """Status per object path (without transition times), from the ledger and the layout.

    Args:
        book: The compiled policy and ledger.
        source: The GPUPool and GPUQueue objects.
        pending_queues: The queue index of every pending pod.
    """
    policy = book.policy
    result: dict[str, Status] = {}
    if policy is None:
        return result
    layout = policy.layout
    pools = {use.name: use for use in pool_usage(policy, book.ledger, book.running.values())}
    for record in source.pools.store.values():
        name = record.metadata.name
        problem = source.problems.get(("GPUPool", name))
        use = None if problem else pools.get(name)
        conflicted = sorted(node for node, contested in layout.conflicts if name in contested)
        conflict = _condition("NodeConflict", False, "NoConflict", "no node is in two pools")
        if conflicted:
            conflict = _condition(
                "NodeConflict",
                True,
                "NodesInSeveralPools",
                f"node(s) {', '.join(conflicted)} selected by this and another pool take no GPU "
                "pods until the selectors are fixed",
            )
        result[f"{POOLS_PATH}/{name}"] = {
            "observedGeneration": record.metadata.generation,
            "nodes": use.nodes if use else 0,
            "gpus": use.gpus if use else 0,
            "allocatedGPUUnits": _units(use.allocated_milli) if use else 0.0,
            "pods": use.pods if use else 0,
            "conditions": [conflict, _valid(problem)],
        }
    queues = {use.name: use for use in queue_usage(policy, book.ledger, pending_queues)}
    for record in source.queues.store.values():
        name = record.metadata.name
        problem = source.problems.get(("GPUQueue", name))
        queue = None if problem else queues.get(name)
        result[f"{QUEUES_PATH}/{name}"] = {
            "observedGeneration": record.metadata.generation,
            "allocatedGPUUnits": _units(queue.used_milli) if queue else 0.0,
            "runningPods": queue.running if queue else 0,
            "pendingPods": queue.pending if queue else 0,
            "conditions": [_valid(problem)],
        }
    return result


def live_statuses(
    book: PolicyBook, source: PolicySource, pods: Mapping[str, PodRecord], pending: Iterable[str]
) -> dict[str, Status]:
    """:func:`desired_statuses` for the cache's pending pods (nothing when no object exists)."""
    policy = book.policy
    if policy is None or not (source.pools.store or source.queues.store):
        return {}
    return desired_statuses(book, source, pending_queue_indexes(book, pods, pending))


def pending_queue_indexes(
    book: PolicyBook, pods: Mapping[str, PodRecord], pending: Iterable[str]
) -> list[int]:
    """The queue each pending pod is charged to (:func:`gpupool.policy.membership.pod_queue`)."""
    if book.policy is None:
        return []
    tables = book.policy.tables
    return [
        tables.queue_of(
            pods[uid].metadata.namespace, pods[uid].metadata.labels.get(LABEL_QUEUE, "")
        )
        for uid in pending
        if uid in pods
    ]


class StatusWriter:
    """Writes changed statuses every :data:`STATUS_PERIOD` seconds (leader only).

    Args:
        api: The API port.
        period: Seconds between rounds.
    """

    def __init__(self, api: KubeAPI, period: float = STATUS_PERIOD) -> None:
        self.api = api
        self.period = period
        self.written: dict[str, Status] = {}
        self.writes = 0
        self._transitions: dict[tuple[str, str], tuple[str, str]] = {}

    def _with_times(self, path: str, status: Status) -> Status:
        conditions = []
        for condition in status.get("conditions", []):
            key = (path, condition["type"])
            previous = self._transitions.get(key)
            if previous is None or previous[0] != condition["status"]:
                previous = (condition["status"], now_rfc3339())
                self._transitions[key] = previous
            conditions.append({**condition, "lastTransitionTime": previous[1]})
        return {**status, "conditions": conditions}

    async def write_changed(self, desired: Mapping[str, Status]) -> None:
        """Patch every object whose status differs from what was last written."""
        for path, status in desired.items():
            if self.written.get(path) == status:
                continue
            try:
                await self.api.patch(f"{path}/status", {"status": self._with_times(path, status)})
            except Exception as error:  # deleted meanwhile, or the server is away: next round
                log.debug("status of %s not written: %s", path, error)
                continue
            self.written[path] = status
            self.writes += 1

    async def run(self, compute: Callable[[], dict[str, Status]]) -> None:
        """Compute and write until cancelled."""
        self.written.clear()  # a new term: the previous leader may have written other values
        while True:
            try:
                await self.write_changed(compute())
            except Exception:  # a status is never worth ending the leader for
                log.exception("writing pool and queue status failed")
            await asyncio.sleep(self.period)
