"""Governance's limits on what a tenant declares or bypasses, on a real API server.

The same harness as :mod:`tests.integration.test_governance` (scheduler and governance in this
process, kwok as the kubelet, the controller on the test's clock, the audit in SQLite):

* a pod that declares ``gpupool.io/expected-runtime`` is warned at its runtime and evicted after
  the pool's ``reclaimGrace``, with an Event and an audit record, and raising the annotation
  after the warning buys nothing; a pod that declares nothing, as old, is left alone;
* a pod placed on a node past the scheduler (``spec.nodeName`` at creation, no allocation
  record) is held as foreign and cleaned up after the not-running timeout;
* a pass stops between two actions once its replica no longer leads;
* a pod that ends while no leader runs is billed to its end once the next leader starts, and
  the agents' usage samples are in the store.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpupool.governance.decisions import Decision
from gpupool.kube.governance.controller import GovernanceController
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.governance_port import GovernancePort, GovernanceReading
from gpupool.store.queries import allocations_overlapping, usage_samples_between
from gpupool.store.records import AuditAction, UsageSample

from .live_helpers import create_pods, events_about, gpu_pod, wait_for, wait_for_events
from .test_governance import Governed, _rfc3339, governed  # noqa: F401 (the fixture)

Json = dict[str, Any]
TIMEOUT = 900.0  # GovernanceConfig's default not-running timeout


async def _running(g: Governed, *names: str) -> dict[str, str]:
    async def running() -> bool:
        cached = {p.metadata.name: p for p in g.scheduler.state.pods.values()}
        return all(n in cached and cached[n].status.phase == "Running" for n in names)

    await wait_for(running, 60, f"pods {names} to run")
    return {name: str((await g.pod(name))["metadata"]["uid"]) for name in names}


def _declaring(g: Governed, name: str, runtime: str | None) -> Json:
    pod = gpu_pod(name, selector={"test": g.namespace}, scheduler=g.scheduler_name)
    if runtime is not None:
        pod["metadata"]["annotations"]["gpupool.io/expected-runtime"] = runtime
    return pod


def _bypassing(g: Governed, name: str) -> Json:
    pod = gpu_pod(name, scheduler=g.scheduler_name)
    pod["spec"]["nodeName"] = g.node
    return pod


async def _reasons(g: Governed, name: str) -> list[str]:
    return [str(e.get("reason")) for e in await events_about(g.api, g.namespace, name)]


async def test_a_pod_past_its_declared_runtime_and_grace_is_evicted(governed: Governed) -> None:  # noqa: F811
    g = governed
    pods = [_declaring(g, "promised", "10m"), _declaring(g, "undeclared", None)]
    await create_pods(g.api, g.namespace, pods)
    uids = await _running(g, "promised", "undeclared")
    await g.skip(590)  # within its 10 minutes
    assert "gpupool.io/governance-warned" not in (await g.pod("promised"))["metadata"].get(
        "annotations", {}
    )
    await g.skip(15)  # past it: warned
    annotations = (await g.pod("promised"))["metadata"]["annotations"]
    assert annotations["gpupool.io/governance-warned"].startswith("declared-runtime@")
    # the tenant raises its declaration now that the scheduler has backfilled on it: no use
    # (here no admission policy fixes it, as with the chart's admissionPolicy.enabled=false)
    path = f"/api/v1/namespaces/{g.namespace}/pods/promised"
    await g.api.patch(path, {"metadata": {"annotations": {"gpupool.io/expected-runtime": "10h"}}})

    async def raised() -> bool:
        cached = next(p for p in g.scheduler.state.pods.values() if p.metadata.name == "promised")
        return cached.metadata.annotations.get("gpupool.io/expected-runtime") == "10h"

    await wait_for(raised, 30, "the raised declaration to reach the cache")
    await g.skip(30)  # half the pool's reclaimGrace (1m)
    assert not await g.gone_or_evicted("promised")
    await g.skip(31)
    await wait_for(lambda: g.gone_or_evicted("promised"), 30, "the overrunning pod's eviction")
    assert not await g.gone_or_evicted("undeclared")  # as old, but it promised nothing

    records = await g.audit(uids["promised"])
    evicted = [r for r in records if r.values.get("step") == "evicted"]
    assert len(evicted) == 1
    assert evicted[0].action is AuditAction.TIME_LIMIT
    assert evicted[0].values["rule"] == "declared-runtime"
    assert evicted[0].values["expected_runtime"] == 600
    assert evicted[0].values["held_seconds"] >= 600 + 60

    async def reclaimed_event() -> bool:
        return "Reclaimed" in await _reasons(g, "promised")

    await wait_for(reclaimed_event, 30, "the Reclaimed Event")
    await wait_for_events(
        g.api,
        g.namespace,
        "the GovernanceWarning Event",
        regarding="promised",
        reason="GovernanceWarning",
    )
    assert g.controller.stats.reclaims["declared-runtime"] == 1


async def test_a_pod_placed_past_the_scheduler_is_cleaned_up_after_the_timeout(
    governed: Governed,  # noqa: F811
) -> None:
    g = governed
    await create_pods(g.api, g.namespace, [_declaring(g, "placed", None), _bypassing(g, "bypass")])
    uids = await _running(g, "placed", "bypass")
    assert uids["bypass"] in g.scheduler.state.foreign  # held, never trusted
    await g.skip(TIMEOUT - 60)
    assert not await g.gone_or_evicted("bypass")
    await g.skip(61)
    await wait_for(lambda: g.gone_or_evicted("bypass"), 30, "the bypassing pod's cleanup")
    assert not await g.gone_or_evicted("placed")  # the scheduler's own pod, as old

    (cleaned,) = [r for r in await g.audit(uids["bypass"]) if r.values.get("step") == "evicted"]
    assert cleaned.action is AuditAction.CLEANUP
    assert cleaned.values["rule"] == "not-running"
    assert cleaned.values["why"] == "bound without a trusted allocation record"

    async def cleaned_event() -> bool:
        return "CleanedUp" in await _reasons(g, "bypass")

    await wait_for(cleaned_event, 30, "the CleanedUp Event")


async def test_a_pass_stops_between_actions_when_the_replica_loses_the_lease(
    governed: Governed,  # noqa: F811
) -> None:
    g = governed
    await create_pods(g.api, g.namespace, [_bypassing(g, "first"), _bypassing(g, "second")])
    await _running(g, "first", "second")
    carry_out = g.controller._carry_out
    acted: list[str] = []

    async def then_lose_the_lease(
        pod: PodRecord, decision: Decision, reading: GovernanceReading, now: float
    ) -> None:
        await carry_out(pod, decision, reading, now)
        acted.append(pod.metadata.name)
        g.scheduler.leading = False  # what LiveScheduler.lead's exit does when the Lease is lost

    g.controller._carry_out = then_lose_the_lease  # type: ignore[method-assign]
    await g.skip(TIMEOUT + 1)
    assert len(acted) == 1
    assert g.controller.stats.passes_stopped == 1
    (other,) = {"first", "second"} - set(acted)
    assert not await g.gone_or_evicted(other)  # no action after the Lease was lost

    g.controller._carry_out = carry_out  # type: ignore[method-assign]
    g.scheduler.leading = True  # leading again: the next pass finishes the work
    await g.controller.run_pass()
    await wait_for(lambda: g.gone_or_evicted(other), 30, "the other pod's cleanup")


async def test_a_pod_that_ends_while_no_leader_runs_is_billed_to_its_end(
    governed: Governed,  # noqa: F811
) -> None:
    """The next leader closes the stored intervals at the pods' ends, not at its own start."""
    g = governed
    pods = await g.start_pods("finishing", "vanishing")
    finishing, vanishing = (str(pods[n]["metadata"]["uid"]) for n in ("finishing", "vanishing"))
    started = g.clock()
    await g.publish_usage({finishing: (60.0, started), vanishing: (70.0, started)})
    await g.controller.run_pass()  # the leader opens both intervals and stores the samples
    await g.writer.flush()
    (sample,) = [s for s in await _samples(g) if s.pod_uid == vanishing]
    assert sample.sm_percent == 70.0

    # no leader runs now: one pod finishes, the other is deleted outright
    base = f"/api/v1/namespaces/{g.namespace}/pods"
    ended = _rfc3339(g.clock() + 5)
    terminated = {"exitCode": 0, "startedAt": _rfc3339(started), "finishedAt": ended}
    status = {
        "phase": "Succeeded",
        "containerStatuses": [
            {
                "name": "main",
                "ready": False,
                "restartCount": 0,
                "image": "registry.invalid/cuda:latest",
                "imageID": "",
                "state": {"terminated": terminated},
            }
        ],
    }
    await g.api.patch(f"{base}/finishing/status", {"status": status})
    await g.api.request("DELETE", f"{base}/vanishing", params={"gracePeriodSeconds": "0"})

    async def both_gone() -> bool:
        return not {finishing, vanishing} & g.scheduler.state.pods.keys()

    await wait_for(both_gone, 30, "both pods to leave the cache")
    g.clock.offset += 3600  # the next leader starts an hour later
    leader = GovernanceController(
        GovernancePort(g.scheduler), g.controller.config, g.writer, g.clock
    )
    await leader.run_pass()
    await g.writer.flush()
    rows = {
        r.pod_uid: r
        for r in await allocations_overlapping(
            g.engine, datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)
        )
    }
    assert rows[finishing].end == datetime.fromisoformat(ended)
    assert rows[vanishing].end == sample.time  # gone: billed to when it was last seen alive
    assert rows[finishing].end < datetime.fromtimestamp(started + 60, UTC)


async def _samples(g: Governed) -> list[UsageSample]:
    return await usage_samples_between(
        g.engine, datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)
    )
