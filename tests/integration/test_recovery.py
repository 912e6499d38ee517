"""Recovery: the watch cut by an API server restart, and leadership lost and regained.

Own module (own control plane): restarting the API server would disturb other tests.
"""

from __future__ import annotations

import asyncio

import pytest

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.client.informer import DELETED, Informer
from gpupool.kube.client.leader import LeaderElector, LeaseConfig
from gpupool.kube.objects.records import PodRecord

from .live_helpers import (
    SchedulerProcesses,
    create_pods,
    gpu_pod,
    make_nodes,
    pending_reason,
    wait_for,
)


async def test_informer_recovers_from_an_api_server_restart_and_sees_deletions(
    control_plane: LocalControlPlane, api: KubeAPI, namespace: str
) -> None:
    seen: list[tuple[str, str]] = []
    informer = Informer(
        api,
        f"/api/v1/namespaces/{namespace}/pods",
        PodRecord,
        lambda kind, pod: seen.append((kind, pod.metadata.name)),
        max_backoff=0.5,
    )
    running = asyncio.create_task(informer.run())
    try:
        # nobody schedules these: later tests' schedulers must not see them as pending
        unscheduled = {"scheduler": "nobody"}
        await create_pods(
            api, namespace, [gpu_pod("keep", **unscheduled), gpu_pod("doomed", **unscheduled)]
        )
        await wait_for(_has(informer, 2), 10, "two pods cached")
        await asyncio.to_thread(control_plane.stop_apiserver)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(control_plane.start_apiserver)
        await api.delete(f"/api/v1/namespaces/{namespace}/pods/doomed")
        await create_pods(api, namespace, [gpu_pod("after", **unscheduled)])
        await wait_for(_names(informer, {"keep", "after"}), 20, "cache to match the server")
        assert (DELETED, "doomed") in seen
        assert informer.stats.errors + informer.stats.gone >= 1
        assert informer.stats.lists >= 1
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


def _has(informer: Informer[PodRecord], count: int):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return len(informer.store) == count

    return check


def _names(informer: Informer[PodRecord], names: set[str]):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return {p.metadata.name for p in informer.store.values()} == names

    return check


async def test_scheduler_recovers_by_itself_when_the_watch_is_cut(
    control_plane: LocalControlPlane,
    api: KubeAPI,
    namespace: str,
    schedulers: SchedulerProcesses,
) -> None:
    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=1)
    schedulers.start("solo")
    await create_pods(api, namespace, [gpu_pod("first", selector=sel)])
    await wait_for(_bound(api, namespace, "first"), 20, "first bound")
    await create_pods(api, namespace, [gpu_pod("second", selector=sel)])
    await wait_for(_pending(api, namespace, "second"), 20, "second pending")

    await asyncio.to_thread(control_plane.stop_apiserver)
    await asyncio.sleep(2.0)
    await asyncio.to_thread(control_plane.start_apiserver)
    # the freed GPU is only visible through the scheduler's restored watch
    await api.delete(f"/api/v1/namespaces/{namespace}/pods/first")
    await wait_for(_bound(api, namespace, "second"), 30, "second bound after the restart")
    assert schedulers.running["solo"].poll() is None


def _bound(api: KubeAPI, namespace: str, name: str):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        pod = await api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return bool(pod["spec"].get("nodeName"))

    return check


def _pending(api: KubeAPI, namespace: str, name: str):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        pod = await api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return "Insufficient gpupool.io/gpu" in pending_reason(pod)

    return check


async def test_a_leader_that_cannot_renew_stops_before_anyone_else_starts(
    api: KubeAPI, namespace: str
) -> None:
    config = LeaseConfig(
        namespace="default",
        name=f"lease-{namespace}",
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.3,
    )
    active: list[str] = []
    overlaps: list[tuple[str, ...]] = []
    terms: list[str] = []

    def lead_as(identity: str):  # type: ignore[no-untyped-def]
        async def lead() -> None:
            active.append(identity)
            terms.append(identity)
            if len(active) > 1:
                overlaps.append(tuple(active))
            try:
                await asyncio.Event().wait()
            finally:
                active.remove(identity)

        return lead

    alpha = LeaderElector(api, "alpha", config)
    beta = LeaderElector(api, "beta", config)
    alpha_task = asyncio.create_task(alpha.run(lead_as("alpha")))
    await wait_for(_equals(terms, ["alpha"]), 5, "alpha leading")
    beta_task = asyncio.create_task(beta.run(lead_as("beta")))
    # an intruder takes the Lease: alpha can no longer renew and must step down
    path = f"/apis/coordination.k8s.io/v1/namespaces/default/leases/lease-{namespace}"
    lease = await api.get(path)
    lease["spec"]["holderIdentity"] = "intruder"
    await api.replace(path, lease)
    await asyncio.wait_for(alpha_task, 5)  # returns once leadership is lost
    await wait_for(_equals(terms, ["alpha", "beta"]), 10, "beta leading after expiry")
    assert overlaps == []
    beta_task.cancel()
    await asyncio.gather(beta_task, return_exceptions=True)


def _equals(terms: list[str], expected: list[str]):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return terms == expected

    return check


async def test_an_installer_owned_lease_deleted_under_a_leader_is_not_made_again(
    api: KubeAPI, namespace: str
) -> None:
    """``helm uninstall`` deletes the chart's Lease while its replicas still run: a replica that
    made it again would leave it outside the release, and the next ``helm install`` refuses an
    object it does not own. With ``create_missing`` off the replica waits for a new one."""
    name = f"owned-{namespace}"
    path = f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}"
    owned = {"app.kubernetes.io/managed-by": "Helm"}
    lease = {"metadata": {"name": name, "namespace": "default", "labels": owned}, "spec": {}}
    await api.create("/apis/coordination.k8s.io/v1/namespaces/default/leases", lease)
    config = LeaseConfig(
        namespace="default",
        name=name,
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.3,
        create_missing=False,
    )
    terms: list[str] = []

    async def lead() -> None:
        terms.append("alpha")
        await asyncio.Event().wait()

    alpha = asyncio.create_task(LeaderElector(api, "alpha", config).run(lead))
    await wait_for(_equals(terms, ["alpha"]), 5, "alpha leading on the installer's Lease")
    held = await api.get(path)
    assert held["spec"]["holderIdentity"] == "alpha"
    assert held["metadata"]["labels"] == owned  # filled in, not replaced
    await api.delete(path)
    await asyncio.wait_for(alpha, 5)  # cannot renew: leadership ends
    await asyncio.sleep(1.5)  # several retry periods
    with pytest.raises(ApiError) as gone:
        await api.get(path)
    assert gone.value.status == 404
    # the next install makes it again: the replica takes it
    again = asyncio.create_task(LeaderElector(api, "alpha", config).run(lead))
    await asyncio.sleep(1)
    await api.create("/apis/coordination.k8s.io/v1/namespaces/default/leases", lease)
    await wait_for(_equals(terms, ["alpha", "alpha"]), 5, "alpha leading again")
    again.cancel()
    await asyncio.gather(again, return_exceptions=True)
