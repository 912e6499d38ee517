"""Governance on a real API server: idle reclaim, share-duration limit, crash loops, phantoms.

The scheduler and the governance controller run in this process against the test's
kube-apiserver (kwok plays the kubelet). kwok has no NVML, so the test writes the node agent's
published interface itself: the Node annotation ``gpupool.io/gpu-usage``. Crash loops are pod
status patches (kwok leaves Running pods' status alone). The controller's clock is the test's,
so grace periods pass without waiting; every action is read back from the SQLite audit store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import msgspec
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.client.informer import ADDED
from gpupool.kube.controlplane.metrics import scheduler_registry
from gpupool.kube.governance.config import GovernanceConfig
from gpupool.kube.governance.controller import GovernanceController
from gpupool.kube.install.crds import install_crds
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.signing import RecordSigner
from gpupool.kube.scheduler.config import LiveConfig
from gpupool.kube.scheduler.governance_port import GovernancePort
from gpupool.kube.scheduler.live import LiveScheduler
from gpupool.kube.scheduler.watch_count import scheduler_watches
from gpupool.store.engine import open_store
from gpupool.store.queries import AuditQuery, allocations_overlapping, audit_events_matching
from gpupool.store.records import AuditAction, AuditEvent
from gpupool.store.writer import StoreWriter

from .live_helpers import (
    SchedulerProcesses,
    create_pods,
    events_about,
    gpu_pod,
    make_nodes,
    wait_for,
)

Json = dict[str, Any]
GROUP = "/apis/gpupool.io/v1alpha1"


class Clock:
    """The controller's clock: real time plus what the test has skipped forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@dataclass
class Governed:
    api: KubeAPI
    namespace: str
    node: str
    scheduler: LiveScheduler
    controller: GovernanceController
    clock: Clock
    writer: StoreWriter
    engine: AsyncEngine

    @property
    def scheduler_name(self) -> str:
        return self.scheduler.config.scheduler_name

    async def start_pods(self, *names: str, **labels: str) -> dict[str, Json]:
        pods = []
        for name in names:
            pod = gpu_pod(name, selector={"test": self.namespace}, scheduler=self.scheduler_name)
            pod["metadata"]["labels"] = dict(labels)
            pods.append(pod)
        await create_pods(self.api, self.namespace, pods)

        async def running() -> bool:
            cached = {p.metadata.name: p for p in self.scheduler.state.pods.values()}
            return all(
                n in cached and cached[n].status.phase == "Running" and cached[n].spec.node_name
                for n in names
            )

        await wait_for(running, 60, f"pods {names} to run")
        return {name: await self.pod(name) for name in names}

    async def pod(self, name: str) -> Json:
        return await self.api.get(f"/api/v1/namespaces/{self.namespace}/pods/{name}")

    async def publish_usage(
        self,
        usage: dict[str, tuple[float, float]],
        memory_busy: dict[str, float] | None = None,
        node: str | None = None,
    ) -> None:
        """Write the agent's annotation: per pod uid (SM %, last active), sampled now.

        ``memory_busy``: memory-controller utilisation per pod uid (absent: the field is left
        out, as an agent older than it writes). On the test's node, or on ``node`` (as a forger
        with some agent's token would).
        """
        target = node or self.node
        now = self.clock()
        stamp = _rfc3339(now)
        pods: dict[str, Json] = {
            uid: {"smPercent": sm, "memoryMib": 1024, "lastActive": _rfc3339(last)}
            for uid, (sm, last) in usage.items()
        }
        for uid, busy in (memory_busy or {}).items():
            pods[uid]["memoryBusyPercent"] = busy
        document = {"sampledAt": stamp, "pods": pods}
        text = json.dumps(document)
        await self.api.patch(
            f"/api/v1/nodes/{target}",
            {"metadata": {"annotations": {"gpupool.io/gpu-usage": text}}},
        )

        async def seen() -> bool:
            cached = self.scheduler.state.nodes.get(target)
            return cached is not None and cached.metadata.annotations.get(
                "gpupool.io/gpu-usage"
            ) == (text)

        await wait_for(seen, 30, "the usage annotation to reach the cache")

    async def skip(self, seconds: float) -> None:
        self.clock.offset += seconds
        await self.controller.run_pass()

    async def gone_or_evicted(self, name: str) -> bool:
        try:
            pod = await self.pod(name)
        except ApiError as error:
            return error.status == 404
        return pod["metadata"].get("deletionTimestamp") is not None

    async def audit(self, pod_uid: str) -> list[AuditEvent]:
        await self.writer.flush()
        return await audit_events_matching(self.engine, AuditQuery(pod=pod_uid))


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _apply(api: KubeAPI, plural: str, name: str, spec: Json) -> None:
    kind = {"gpupools": "GPUPool", "gpuqueues": "GPUQueue"}[plural]
    body = {"apiVersion": "gpupool.io/v1alpha1", "kind": kind, "metadata": {"name": name}}
    await api.create(f"{GROUP}/{plural}", {**body, "spec": spec})


@pytest.fixture
async def governed(
    api: KubeAPI, namespace: str, tmp_path: Path, control_plane: LocalControlPlane
) -> AsyncIterator[Governed]:
    await install_crds(api)
    (node,) = await make_nodes(api, namespace, 1, gpus=4)
    async with governance_on(api, control_plane, namespace, node.name, tmp_path) as governed:
        yield governed


@contextlib.asynccontextmanager
async def governance_on(
    api: KubeAPI,
    control_plane: LocalControlPlane,
    namespace: str,
    node: str,
    tmp_path: Path,
    *,
    claims: bool = False,
    mode: str = "Exclusive",
) -> AsyncIterator[Governed]:
    """The test's pool and queue, a leading scheduler and its governance controller.

    The pool (of ``mode``) takes the nodes labelled ``test=<namespace>``; ``claims``: the
    scheduler places pods with DRA claims too. The scheduler has a client of its own with a
    connection for each of its watches, as ``gpupool control-plane`` sizes it.
    """
    await _apply(
        api,
        "gpupools",
        namespace,
        {
            "mode": mode,
            "nodeSelector": {"test": namespace},
            "governance": {
                "idleThreshold": {"gpuUtilPercent": 10},
                "idleGrace": "1m",
                "reclaimGrace": "1m",
                "maxShareDuration": "8h",
                "exemptClasses": ["serving"],
            },
        },
    )
    # the queue lists the exempt class: an exemption holds only for a class the queue allows
    queue = {"namespaces": [namespace], "maxShareDuration": "1h", "allowedClasses": ["serving"]}
    await _apply(api, "gpuqueues", namespace, queue)
    engine = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    writer = StoreWriter(engine, flush_interval=0.05)
    writer.start()
    config = LiveConfig(
        identity=f"gov-{namespace}", scheduler_name=f"gov-{namespace}", claims=claims
    )
    own = KubeAPI.from_kubeconfig(
        control_plane.kubeconfig, connections=16 + scheduler_watches(claims)
    )
    scheduler = LiveScheduler(own, config, signer=RecordSigner.generate())
    clock = Clock()
    controller = GovernanceController(
        GovernancePort(scheduler),
        GovernanceConfig(interval=3600, phantom_interval=0),
        writer,
        clock,
    )
    informers = asyncio.create_task(scheduler.run_informers())
    lead = asyncio.create_task(scheduler.lead())
    try:
        await wait_for(lambda: _true(scheduler.leading and scheduler.synced), 30, "the leader")
        yield Governed(api, namespace, node, scheduler, controller, clock, writer, engine)
    finally:
        for task in (lead, informers):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(lead, informers, return_exceptions=True)
        await writer.close(timeout=10)
        await engine.dispose()
        await own.close()


async def _true(value: bool) -> bool:
    return value


def _uid(pod: Json) -> str:
    return str(pod["metadata"]["uid"])


async def test_a_forged_usage_sample_on_another_node_changes_nothing(governed: Governed) -> None:
    """Only a pod's own node speaks for it: another node's sample neither shields nor accuses."""
    g = governed
    (decoy,) = await make_nodes(g.api, f"{g.namespace}-decoy", 1)
    pods = await g.start_pods("idle", "busy")
    idle, busy = _uid(pods["idle"]), _uid(pods["busy"])
    start = g.clock()
    own = {idle: (0.0, start), busy: (80.0, start)}
    forged = {idle: (95.0, start), busy: (0.0, start - 7200)}  # idle "active", busy "idle"
    await g.publish_usage(own)
    await g.publish_usage(forged, node=decoy.name)
    await g.skip(61)  # past the idle grace
    await g.publish_usage({**own, busy: (85.0, g.clock())})
    await g.publish_usage({**forged, idle: (95.0, g.clock())}, node=decoy.name)
    await g.controller.run_pass()
    warned = (await g.pod("idle"))["metadata"]["annotations"]["gpupool.io/governance-warned"]
    assert warned.startswith("idle@")  # the forged "active" sample did not shield it
    assert "gpupool.io/governance-warned" not in (await g.pod("busy"))["metadata"].get(
        "annotations", {}
    )  # and the forged "idle" sample did not accuse the busy pod


async def test_idle_pod_reclaimed_after_its_grace_active_and_exempt_pods_untouched(
    governed: Governed,
) -> None:
    g = governed
    pods = await g.start_pods("idle", "active", "copying")
    pods |= await g.start_pods("exempt-idle", **{"gpupool.io/class": "serving"})
    start = g.clock()
    idle, active, exempt, copying = (
        _uid(pods[n]) for n in ("idle", "active", "exempt-idle", "copying")
    )
    # copying: SM 0 but its memory controller busy (a checkpoint streamed to the host)
    usage = {idle: (0.0, start), active: (80.0, start), exempt: (0.0, start), copying: (0, start)}
    busy = {copying: 30.0}
    await g.publish_usage(usage, busy)
    await g.skip(0)
    assert (await g.pod("idle"))["metadata"].get("annotations", {}).get(
        "gpupool.io/governance-warned"
    ) is None

    await g.skip(61)  # idle for over the pool's idleGrace (1m): warned
    await g.publish_usage({**usage, active: (75.0, g.clock())}, busy)
    await g.controller.run_pass()
    warned = (await g.pod("idle"))["metadata"]["annotations"]["gpupool.io/governance-warned"]
    assert warned.startswith("idle@")
    assert not await g.gone_or_evicted("idle")  # not before the grace

    await g.skip(30)  # half the grace: nothing yet
    assert not await g.gone_or_evicted("idle")

    await g.publish_usage({**usage, active: (90.0, g.clock())}, busy)
    await g.skip(31)  # the grace has passed and it is still idle: evicted
    await wait_for(lambda: g.gone_or_evicted("idle"), 30, "the idle pod's eviction")
    for name in ("active", "exempt-idle", "copying"):
        pod = await g.pod(name)
        assert pod["metadata"].get("deletionTimestamp") is None, name
        assert "gpupool.io/governance-warned" not in pod["metadata"].get("annotations", {}), name

    records = await g.audit(idle)
    steps = [(r.action, r.values.get("step"), r.values.get("rule")) for r in records]
    assert (AuditAction.RECLAIM, "warned", "idle") in steps
    assert (AuditAction.RECLAIM, "evicted", "idle") in steps
    evicted = next(r for r in records if r.values.get("step") == "evicted")
    assert evicted.values["idle_seconds"] >= 120
    assert evicted.values["threshold_percent"] == 10
    assert evicted.tenant == g.namespace
    assert evicted.pool == g.namespace
    assert [r.action for r in await g.audit(active)] == [AuditAction.BIND]
    assert [r.action for r in await g.audit(copying)] == [AuditAction.BIND]
    assert g.controller.stats.reclaims["idle"] == 1

    text = _metrics(g)
    assert 'gpupool_governance_reclaims_total{rule="idle"} 1.0' in text
    policy = await audit_events_matching(g.engine, AuditQuery(actions=(AuditAction.POLICY_CHANGE,)))
    pool = [r for r in policy if r.kind == "GPUPool" and r.name == g.namespace]
    assert len(pool) == 1  # many passes, one generation: one record
    assert pool[0].values["spec"]["governance"]["idleGrace"] == "1m"
    assert (
        f'gpupool_governance_pod_idle_seconds{{namespace="{g.namespace}",pod="exempt-idle"}}'
        in (text)
    )
    assert 'pod="active"' not in text
    assert 'pod="copying"' not in text  # busy memory: not idle
    # the congestion view's idle GPU-hours: the exempt pod's class held its GPU idle throughout
    held = g.scheduler.applier.congestion.ledger.totals.idle_gpu_seconds
    serving = sum(seconds for party, seconds in held.items() if party.workload_class == "serving")
    assert 120 <= serving <= g.clock() - start + 1


async def _node_events(g: Governed, reason: str) -> list[Json]:
    events = await g.api.list_items("/apis/events.k8s.io/v1/namespaces/default/events")
    return [e for e in events if e["regarding"].get("name") == g.node and e.get("reason") == reason]


async def test_a_silent_agent_never_makes_a_pod_idle_or_active(governed: Governed) -> None:
    """The agent's last sample goes stale: no reclaim, no clearing, a metric and a Node Event."""
    g = governed
    pods = await g.start_pods("quiet")
    uid = _uid(pods["quiet"])
    await g.publish_usage({uid: (0.0, g.clock())})
    await g.skip(61)  # idle past idleGrace on a sample 61 s old (fresh at a 60 s period): warned
    warned = (await g.pod("quiet"))["metadata"]["annotations"]["gpupool.io/governance-warned"]
    assert warned.startswith("idle@")
    assert g.node not in g.controller.usage.silence.silent

    await g.skip(200)  # the agent published nothing since: its sample is stale (> 3 periods)
    await g.skip(60)  # past the reclaim grace, twice over
    assert not await g.gone_or_evicted("quiet")
    annotations = (await g.pod("quiet"))["metadata"]["annotations"]
    assert annotations["gpupool.io/governance-warned"] == warned  # neither reclaimed nor cleared
    assert g.node in g.controller.usage.silence.silent  # others may be silent too
    silent = len(g.controller.usage.silence.silent)
    assert f"gpupool_governance_stale_usage_nodes {silent:.1f}" in _metrics(g)
    assert 'pod="quiet"' not in _metrics(g)  # not reported idle either

    async def told() -> bool:
        return bool(await _node_events(g, "GPUUsageStale"))

    await wait_for(told, 30, "the Node Event saying the agent is silent")
    [event] = await _node_events(g, "GPUUsageStale")
    assert "neither idle nor active" in event["note"]

    await g.publish_usage({uid: (0.0, g.clock() - 400)})  # back, and the pod is still idle
    await g.controller.run_pass()
    assert g.node not in g.controller.usage.silence.silent
    assert g.controller.stats.stale_usage_nodes == silent - 1
    await wait_for(lambda: g.gone_or_evicted("quiet"), 30, "the reclaim on fresh samples")
    assert len(await _node_events(g, "GPUUsageStale")) == 1  # once, not once per pass

    async def back() -> bool:
        return bool(await _node_events(g, "GPUUsageFresh"))

    await wait_for(back, 30, "the Node Event saying the agent is back")


async def test_pod_past_its_queue_share_duration_is_warned_then_evicted(
    governed: Governed,
) -> None:
    g = governed
    pods = await g.start_pods("long")
    long_uid = _uid(pods["long"])
    await g.skip(1800)  # 30 min: under the queue's 1h (the pool allows 8h)
    assert not await g.gone_or_evicted("long")
    await g.skip(1801)
    annotations = (await g.pod("long"))["metadata"]["annotations"]
    assert annotations["gpupool.io/governance-warned"].startswith("max-share-duration@")
    await g.skip(61)
    await wait_for(lambda: g.gone_or_evicted("long"), 30, "the long pod's eviction")
    records = await g.audit(long_uid)
    evicted = [r for r in records if r.values.get("step") == "evicted"]
    assert len(evicted) == 1
    assert evicted[0].action is AuditAction.TIME_LIMIT
    assert evicted[0].values["max_share_duration"] == 3600  # the queue's, shorter than 8h
    assert evicted[0].values["held_seconds"] >= 3600

    # the allocation is in the store for the cost report, closed once the pod is gone
    async def gone_from_cache() -> bool:
        return long_uid not in g.scheduler.state.pods

    await wait_for(gone_from_cache, 30, "the evicted pod to leave the cache")
    await g.controller.run_pass()
    await g.writer.flush()
    rows = await allocations_overlapping(
        g.engine, datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)
    )
    (row,) = [r for r in rows if r.pod_uid == long_uid]
    assert row.queue == g.namespace
    assert row.pool == g.namespace
    assert row.units == 1.0
    assert row.end is not None
    assert (row.end - row.start).total_seconds() >= 3600 + 61
    assert g.controller.stats.queue_gpu_hours[g.namespace] >= (3600 + 61) / 3600


async def test_crash_looping_pod_cleaned_healthy_restarted_pod_untouched(
    governed: Governed,
) -> None:
    g = governed
    pods = await g.start_pods("crashing", "restarted")

    def status(restarts: int, waiting: str | None) -> Json:
        state: Json = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
        return {
            "status": {
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": waiting is None,
                        "restartCount": restarts,
                        "image": "registry.invalid/cuda:latest",
                        "imageID": "",
                        "state": state,
                    }
                ]
            }
        }

    base = f"/api/v1/namespaces/{g.namespace}/pods"
    await g.api.patch(f"{base}/crashing/status", status(6, "CrashLoopBackOff"))
    await g.api.patch(f"{base}/restarted/status", status(9, None))

    async def seen() -> bool:
        cached = {p.metadata.name: p for p in g.scheduler.state.pods.values()}
        return all(
            cached[n].status.container_statuses for n in ("crashing", "restarted") if n in cached
        )

    await wait_for(seen, 30, "the status patches to reach the cache")
    await g.controller.run_pass()
    await wait_for(lambda: g.gone_or_evicted("crashing"), 30, "the crash-looping pod's cleanup")
    assert not await g.gone_or_evicted("restarted")
    records = await g.audit(_uid(pods["crashing"]))
    cleanup = [r for r in records if r.action is AuditAction.CLEANUP]
    assert len(cleanup) == 1
    assert cleanup[0].values["rule"] == "crash-loop"
    assert cleanup[0].values["restarts"] == 6
    assert cleanup[0].values["restart_limit"] == 5
    assert 'gpupool_governance_cleanups_total{rule="crash-loop"} 1.0' in _metrics(g)
    await g.controller.run_pass()  # the eviction reaching the cache late is not a phantom
    assert g.controller.stats.releases == 0


async def test_phantom_share_released_within_one_pass(governed: Governed) -> None:
    g = governed
    pods = await g.start_pods("real")
    ghost = json.loads(json.dumps(pods["real"]))
    ghost["metadata"]["name"] = "ghost"
    ghost["metadata"]["uid"] = "00000000-0000-4000-8000-000000000001"
    # a pod the cache still holds though the API server has no such pod (a missed deletion)
    state = g.scheduler.state
    state.on_pod(ADDED, msgspec.convert(ghost, PodRecord))
    state.sync()
    assert state.snapshot is not None
    assert "00000000-0000-4000-8000-000000000001" in state.snapshot.allocations
    await g.controller.run_pass()
    assert "00000000-0000-4000-8000-000000000001" not in state.snapshot.allocations
    assert _uid(pods["real"]) in state.snapshot.allocations  # the real pod keeps its share
    records = await g.audit("00000000-0000-4000-8000-000000000001")
    assert len(records) == 1
    assert records[0].action is AuditAction.CLEANUP
    assert records[0].values["rule"] == "phantom"
    assert records[0].values["why"] == "deleted"
    assert records[0].values["held_on"] == g.node
    assert g.controller.stats.releases == 1


def _metrics(g: Governed) -> str:
    from prometheus_client import generate_latest

    registry = scheduler_registry(g.scheduler, lambda: True, g.controller)
    return generate_latest(registry).decode()


async def test_a_reclaim_a_disruption_budget_blocks_is_retried_then_deleted_past_the_wait(
    governed: Governed,
) -> None:
    g = governed
    pods = await g.start_pods("guarded", app="guarded")
    await g.api.create(
        f"/apis/policy/v1/namespaces/{g.namespace}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    await g.skip(3601)  # past the queue's 1h: warned
    # no kube-controller-manager here: the API server refuses (429) any eviction under a budget
    # it has not processed yet, as it does for a budget at its limit
    await g.skip(61)  # past the grace: the eviction is refused, so nothing is done
    await g.skip(61)  # and tried again, within the pool's disruptionBudgetWait (default 5m)
    assert g.controller.stats.evictions_blocked == 2
    assert g.controller.stats.reclaims["max-share-duration"] == 0
    assert not await g.gone_or_evicted("guarded")

    # the pool waits 1 s for budgets: the next pass after it deletes the pod
    await g.api.patch(f"{GROUP}/gpupools/{g.namespace}", {"spec": {"disruptionBudgetWait": "1s"}})
    guarded = g.scheduler.state.pods[_uid(pods["guarded"])]

    async def wait_over() -> bool:
        return g.scheduler.departures.wait_left(guarded) == 0

    await wait_for(wait_over, 30, "the pool's new wait to pass")
    await g.skip(61)
    assert g.controller.stats.reclaims["max-share-duration"] == 1
    assert await g.gone_or_evicted("guarded")
    (record,) = [
        e for e in await g.audit(_uid(pods["guarded"])) if e.values.get("step") == "deleted"
    ]
    assert f"PodDisruptionBudget {g.namespace}/guard blocked eviction for" in record.reason
    assert "deleted past the pool's disruptionBudgetWait (1 s), grace 30 s" in record.reason

    async def reported() -> bool:
        events = await events_about(g.api, g.namespace, "guarded")
        return any(
            e["reason"] == "Reclaimed" and f"{g.namespace}/guard blocked eviction" in e["note"]
            for e in events
        )

    await wait_for(reported, 30, "the Reclaimed event naming the budget")


async def test_control_plane_with_db_audits_binds_and_rejections(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses, tmp_path: Path
) -> None:
    """``gpupool control-plane --db`` (here through GPUPOOL_DB_URL) as a user runs it."""
    await make_nodes(api, namespace, 1, gpus=2)
    selector = {"test": namespace}
    pods = [
        gpu_pod("fits", gpus=1, selector=selector),
        gpu_pod("too-big", gpus=8, selector=selector),
    ]
    await create_pods(api, namespace, pods)
    url = f"sqlite+aiosqlite:///{tmp_path / 'control-plane.db'}"
    schedulers.extra_args = ("--insecure-local",)  # the test reads the face from loopback
    process = schedulers.start("audited", env={"GPUPOOL_DB_URL": url})

    async def bound() -> bool:
        pod = await api.get(f"/api/v1/namespaces/{namespace}/pods/fits")
        return bool(pod["spec"].get("nodeName"))

    await wait_for(bound, 60, "the pod to be bound")
    await asyncio.sleep(2)  # the rejection of too-big is reported in the same cycles
    face = await schedulers.http_url("audited")

    async def served() -> bool:  # the face reads the same store (the writer lands within 1 s)
        async with httpx2.AsyncClient(base_url=face) as client:
            audit = (await client.get("/api/v1/audit", params={"limit": 1000})).json()
        return f"{namespace}/fits" in {item["subject"] for item in audit["items"]}

    await wait_for(served, 30, "the bind in the control plane's /api/v1/audit")
    async with httpx2.AsyncClient(base_url=face) as client:
        cost = (await client.get("/api/v1/cost")).json()
        actions = (await client.get("/api/v1/governance/actions")).json()
    assert (cost["configured"], actions["configured"]) == (True, True)
    assert cost["buckets"]
    process.terminate()  # SIGTERM: the writer lands what it holds before the process exits
    assert process.wait(30) == 0
    engine = await open_store(url)
    try:
        events = await audit_events_matching(engine, AuditQuery())
    finally:
        await engine.dispose()
    mine = [e for e in events if e.namespace == namespace]
    binds = [e for e in mine if e.action is AuditAction.BIND]
    assert [e.name for e in binds] == ["fits"]
    assert binds[0].values["node"] == f"{namespace}-n000"
    assert binds[0].actor == "audited"
    rejects = [e for e in mine if e.action is AuditAction.REJECT]
    # every change of its reason is one record, and no reason is recorded twice
    assert {e.name for e in rejects} == {"too-big"}
    assert len({e.reason for e in rejects}) == len(rejects)
    # the engine may first say "no room ... this cycle", then the node counts; either order
    assert any("Insufficient" in e.reason for e in rejects)
