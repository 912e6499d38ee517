"""Audit records of the control plane: binds, rejections, governance actions, policy changes.

One place builds every :class:`~gpupool.store.records.AuditEvent` the control plane writes, so
each carries the same fields (object, reason, the deciding values, tenant, pool, actor) and a
key chosen so that an action recorded twice (a retried pass, a restarted controller, two code
paths) is one row: ``bind/<uid>``, ``preempt/<uid>``, ``warn/<uid>/<rule>``, ``reclaimed/<uid>``,
``cleanedup/<uid>``, ``policy/<kind>/<uid>/<generation>``. Without a store (no ``--db``) every
method does nothing: Events and logs still say what happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpupool.governance.decisions import Action, Rule
from gpupool.kube.governance.facts import GovernanceSettings
from gpupool.kube.objects.records import PodRecord
from gpupool.store.records import AuditAction, AuditEvent
from gpupool.store.writer import StoreWriter

ACTIONS = {
    Rule.IDLE: AuditAction.RECLAIM,
    Rule.MAX_SHARE_DURATION: AuditAction.TIME_LIMIT,
    Rule.DECLARED_RUNTIME: AuditAction.TIME_LIMIT,
}
"""The audit action of each rule's records; every other rule is a cleanup."""
_DECISIONS = {"bind": AuditAction.BIND, "preempt": AuditAction.PREEMPT}
"""The audit action of each scheduler decision the hook reports; the others are rejections."""
REASON_LENGTH = 2000


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class Auditor:
    """Builds and queues the control plane's audit records.

    Args:
        writer: The store's buffered writer; ``None``: no records.
        actor: This replica's identity.
    """

    def __init__(self, writer: StoreWriter | None, actor: str) -> None:
        self.writer = writer
        self.actor = actor
        self._policy_seen: dict[tuple[str, str], tuple[str, int]] = {}
        self._pending: set[asyncio.Task[None]] = set()

    def decision(
        self, pod: PodRecord, what: str, detail: str, settings: GovernanceSettings, now: float
    ) -> None:
        """A bind, a rejection or a preemption victim's departure, as the scheduler reports it.

        ``detail`` is ``node=... gpus=...`` for a bind, the reason for a rejection, and for a
        victim (``preempt``) who took its place, its grace and the budget that blocked its
        eviction. Called synchronously from the scheduling loop; the record is queued by a task.
        """
        if self.writer is None:
            return
        meta = pod.metadata
        bind = what == "bind"
        values = dict(part.split("=", 1) for part in detail.split() if "=" in part) if bind else {}
        keys = {"bind": f"bind/{meta.uid}", "preempt": f"preempt/{meta.uid}"}
        event = AuditEvent(
            time=_moment(now),
            action=_DECISIONS.get(what, AuditAction.REJECT),
            kind="Pod",
            namespace=meta.namespace,
            name=meta.name,
            uid=meta.uid,
            reason=detail[:REASON_LENGTH],
            values=values,
            tenant=settings.queue_of(pod),
            actor=self.actor,
            **({"key": keys[what]} if what in keys else {}),
        )
        task = asyncio.get_running_loop().create_task(self.writer.audit(event))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def plan(
        self,
        pod: PodRecord,
        text: str,
        values: Mapping[str, float | int | str],
        settings: GovernanceSettings,
        where: tuple[str, float],
    ) -> None:
        """A consolidation plan for ``pod`` (its words and its what-if), in ``where``: pool, now."""
        if self.writer is None:
            return
        meta = pod.metadata
        pool, now = where
        event = AuditEvent(
            time=_moment(now),
            action=AuditAction.CONSOLIDATE,
            kind="Pod",
            namespace=meta.namespace,
            name=meta.name,
            uid=meta.uid,
            reason=text[:REASON_LENGTH],
            values=dict(values),
            tenant=settings.queue_of(pod),
            pool=pool,
            actor=self.actor,
        )
        task = asyncio.get_running_loop().create_task(self.writer.audit(event))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def action(
        self,
        pod: PodRecord,
        decision: Action,
        now: float,
        step: str,
        key: str,
        settings: GovernanceSettings,
        pool: str,
        note: str = "",
    ) -> None:
        """A governance step (warned, evicted, deleted, gone, released) with its rule and values.

        ``note`` says how a removed pod left (its grace; the budget that blocked its eviction
        and for how long, when it was deleted past the pool's wait).
        """
        if self.writer is None:
            return
        meta = pod.metadata
        await self.writer.audit(
            AuditEvent(
                time=_moment(now),
                action=ACTIONS.get(decision.rule, AuditAction.CLEANUP),
                kind="Pod",
                namespace=meta.namespace,
                name=meta.name or meta.uid,
                uid=meta.uid,
                reason=f"{step}: {decision.message}{'; ' + note if note else ''}"[:REASON_LENGTH],
                values={"rule": decision.rule.value, "step": step, **decision.values},
                tenant=settings.queue_of(pod),
                pool=pool,
                actor=self.actor,
                key=key,
            )
        )

    async def policy_changes(
        self, kind: str, objects: Sequence[Mapping[str, Any]], now: float
    ) -> None:
        """One record per generation of each GPUPool or GPUQueue, with its spec."""
        if self.writer is None:
            return
        for obj in objects:
            meta = obj.get("metadata", {})
            version = (str(meta.get("uid", "")), int(meta.get("generation", 0)))
            name = str(meta.get("name", ""))
            if self._policy_seen.get((kind, name)) == version:
                continue
            self._policy_seen[(kind, name)] = version
            await self.writer.audit(
                AuditEvent(
                    time=_moment(now),
                    action=AuditAction.POLICY_CHANGE,
                    kind=kind,
                    namespace="",
                    name=name,
                    uid=version[0],
                    reason=f"{kind} {name} generation {version[1]}",
                    values={"generation": version[1], "spec": obj.get("spec", {})},
                    actor=self.actor,
                    key=f"policy/{kind}/{version[0]}/{version[1]}",
                )
            )
