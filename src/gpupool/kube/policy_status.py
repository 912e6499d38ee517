"""GPUPool and GPUQueue status: the leader's true numbers, so ``kubectl get gpool/gq`` can be read.

Pool status: member nodes, GPUs, GPU units allocated to this scheduler's pods, pods, and two
conditions: ``NodeConflict`` (True while nodes are selected by this pool and another one; those
nodes take no GPU pods until the selectors are fixed, see :mod:`gpupool.policy.pools`) and
``Valid`` (False with the parser's message, naming the field, when the object is left out of the
policy). Queue status: units allocated over all pools, running and pending pods, ``Valid``.

Numbers come from the same ledger the engine admits against, so what ``kubectl`` shows is what
quotas enforce. Status is written with a merge patch of the ``status`` subresource, only for
objects whose values changed, at most every :data:`STATUS_PERIOD` seconds: a busy cluster changes
its numbers constantly, and a write per change would compete with binds for the API server.
A condition's ``lastTransitionTime`` moves only when its status does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpupool.kube.api import KubeAPI
from gpupool.kube.policy_book import PolicyBook, queue_label
from gpupool.kube.policy_source import POOLS_PATH, QUEUES_PATH, PolicySource
from gpupool.kube.records import PodRecord
from gpupool.kube.writes import now_rfc3339
from gpupool.policy.units import MILLI_UNITS

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
    layout, tables, ledger = policy.layout, policy.tables, book.ledger
    pods_in_pool = Counter(running.pool for running in book.running.values())
    for record in source.pools.store.values():
        name = record.metadata.name
        problem = source.problems.get(("GPUPool", name))
        p = None if problem else layout.index(name)
        conflicted = sorted(node for node, pools in layout.conflicts if name in pools)
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
            "nodes": int(layout.node_count[p]) if p is not None else 0,
            "gpus": int(layout.capacity[p]) // MILLI_UNITS if p is not None else 0,
            "allocatedGPUUnits": _units(int(ledger.used[:, p].sum())) if p is not None else 0.0,
            "pods": pods_in_pool[p] if p is not None else 0,
            "conditions": [conflict, _valid(problem)],
        }
    pending = Counter(pending_queues)
    index = {queue.name: q for q, queue in enumerate(tables.queues)}
    for record in source.queues.store.values():
        name = record.metadata.name
        q = index.get(name)
        problem = source.problems.get(("GPUQueue", name))
        result[f"{QUEUES_PATH}/{name}"] = {
            "observedGeneration": record.metadata.generation,
            "allocatedGPUUnits": _units(int(ledger.used[q].sum())) if q is not None else 0.0,
            "runningPods": int(ledger.pods[q]) if q is not None else 0,
            "pendingPods": pending[q] if q is not None and not problem else 0,
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
    tables, config = policy.tables, book.config
    queues = (
        tables.queue_of(pods[uid].metadata.namespace, queue_label(pods[uid], config))
        for uid in pending
        if uid in pods
    )
    return desired_statuses(book, source, queues)


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
