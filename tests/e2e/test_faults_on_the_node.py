"""Faults on the real node while tenants' pods run, and the control plane's leader killed.

The chart is installed as in :mod:`test_shares_on_the_node` (HAMi isolation, no GPUPool), with
the agent's hand-off collection at 60 s instead of 300 (``agent.collectAfterSeconds``) so that
"nothing leaks" is seen within the test, and still far longer than a restarted kubelet takes to
list its pods again. Containerd, the kubelet and the agent are restarted in turn, as an operator
or a crash would: containerd stopped (SIGTERM) and then killed (SIGKILL), the kubelet killed, as
processes of the node, and the agent by deleting its pod (its DaemonSet makes a new one).
Tenants' containers print what they see of their GPUs every two seconds, so their view after each
fault is read from their log, as ``kubectl logs`` would.

Leader election needs a second replica, but with ``hostNetwork`` on one node a second pod of the
chart's Deployment would bind the first one's port; the standby is the chart's own Deployment
read back from the API server with only its name, port and one label changed
(:func:`chart.standby_of`). The leader's pod is deleted as a drain would (SIGTERM, its grace
period); each pod's Scheduled Event names the replica that bound it, and the API Service's
EndpointSlices name the leader alone, before and after.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from gpupool.agent.cdi import files_path, spec_path
from gpupool.agent.handoff import STATE_FILE
from gpupool.devcluster.nodens import session_path
from gpupool.devcluster.processes import free_port
from gpupool.kube.client.api import ApiError, KubeAPI

from .chart import (
    DEPLOYMENTS,
    NAMESPACE,
    STANDBY_LABEL,
    installed_with_hami,
    ready_pods,
    remove_standby,
    standby_of,
)
from .conftest import Cluster, wait_for
from .workloads import (
    CAPACITY,
    CONTROL_NODES,
    DONE,
    GPUS,
    INSPECT,
    SHARE,
    WHOLE,
    devices_in,
    env_in,
    expected_gpus,
    failed_admission,
    host_device,
    list_pods,
    pending_reason,
    pod_log,
    published,
    remove_namespace,
    tenant_namespace,
    tenants,
    workload_pod,
)

pytestmark = pytest.mark.e2e

COLLECT_AFTER = 60
WATCH = f"""
i=0
while true; do
i=$((i+1))
echo "round=$i"
{INSPECT}
echo "end=$i"
sleep 2
done
"""
"""INSPECT every two seconds, each report between ``round=N`` and ``end=N``."""
WATCHED = {"share": SHARE, "whole": WHOLE}
"""The pods that run through every fault."""
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/gpupool-scheduler"


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> Iterator[Cluster]:
    yield from installed_with_hami(cluster, {"agent.collectAfterSeconds": str(COLLECT_AFTER)})


def _rounds(text: str) -> dict[int, dict[str, str]]:
    """The complete reports in a WATCH log, by round."""
    rounds: dict[int, dict[str, str]] = {}
    current, seen = -1, dict[str, str]()
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "round":
            current, seen = int(value), {}
        elif key == "end" and int(value) == current:
            rounds[current] = seen
        elif value:
            seen[key] = value
    return rounds


async def latest_view(
    api: KubeAPI, namespace: str, name: str, after: int = 0
) -> tuple[int, dict[str, str]]:
    """The last complete report of a WATCH pod printed after round ``after``, and its round."""
    found: dict[int, dict[str, str]] = {}

    async def printed() -> bool:
        nonlocal found
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
        try:
            text = (await api.request("GET", path, params={"tailLines": "150"})).decode()
        except ApiError:  # not started yet
            return False
        found = {n: view for n, view in _rounds(text).items() if n > after}
        return bool(found)

    await wait_for(printed, 120, f"{namespace}/{name} to report after round {after}")
    last = max(found)
    return last, found[last]


async def views_of(api: KubeAPI, namespace: str) -> dict[str, tuple[int, dict[str, str]]]:
    return {name: await latest_view(api, namespace, name) for name in WATCHED}


async def container_states(api: KubeAPI, namespace: str) -> dict[str, tuple[str, int, bool]]:
    """Each pod's container: its ID, its restarts, whether it runs."""
    states = {}
    for pod in await list_pods(api, namespace):
        (status,) = pod["status"]["containerStatuses"]
        running = "running" in status["state"]
        states[pod["metadata"]["name"]] = (status["containerID"], status["restartCount"], running)
    return states


def handoff_tokens(cluster: Cluster) -> dict[str, Any]:
    """The agent's persisted hand-off map (token to entry) on the node."""
    state = session_path(cluster.node.session, "/var/lib/gpupool") / "agent" / STATE_FILE
    return dict(json.loads(state.read_text())) if state.exists() else {}


def containers_of(cluster: Cluster, namespace: str) -> list[str]:
    """Containerd's containers (sandboxes included) of the pods in ``namespace``."""
    selector = f'labels."io.kubernetes.pod.namespace"=={namespace}'
    listing = cluster.node.containerd.ctr("containers", "list", "--quiet", selector)
    return list(listing.stdout.split())


async def expect_exactly_its_gpus(
    cluster: Cluster, tenant: KubeAPI, namespace: str, name: str, seen: dict[str, str]
) -> None:
    """The container's device nodes are its GPUs' (the node's own) and the control nodes."""
    devices = devices_in(seen)
    mine = await expected_gpus(tenant, namespace, name)
    assert set(devices) == mine | CONTROL_NODES, (name, devices)
    for path, shown in devices.items():
        assert shown == host_device(cluster, path.removeprefix("/dev/")), (name, path)


async def restart_containerd(cluster: Cluster, api: KubeAPI) -> None:
    """Stop containerd as its service manager would (SIGTERM) and start it again."""
    cluster.node.containerd.stop()  # the containers run on under their shims
    cluster.node.start_containerd()
    await cluster.node.wait_ready()


async def crash_containerd(cluster: Cluster, api: KubeAPI) -> None:
    """SIGKILL containerd (no cleanup, stale sockets) and start it again over its state."""
    cluster.node.containerd.kill()
    cluster.node.start_containerd()
    await cluster.node.wait_ready()


async def _ready_condition(api: KubeAPI, node: str) -> dict[str, str]:
    conditions = (await api.get(f"/api/v1/nodes/{node}"))["status"]["conditions"]
    (ready,) = [c for c in conditions if c["type"] == "Ready"]
    return dict(ready)


async def crash_kubelet(cluster: Cluster, api: KubeAPI) -> None:
    """SIGKILL the kubelet and start it again; wait until the new one posted the Node's status.

    (SIGTERM would add nothing: without graceful node shutdown the kubelet just exits on it.)
    A restarted kubelet forgets every device plugin until it registers again (its first
    status may count no GPU), so the caller then waits for the devices to be back too.
    """
    before = (await _ready_condition(api, cluster.node.name))["lastHeartbeatTime"]
    cluster.node.kubelet.kill()
    cluster.node.start_kubelet()

    async def posted_again() -> bool:
        ready = await _ready_condition(api, cluster.node.name)
        return ready["status"] == "True" and ready["lastHeartbeatTime"] != before

    await wait_for(posted_again, 180, "the restarted kubelet's Node status")


async def restart_agent(cluster: Cluster, api: KubeAPI) -> None:
    """Delete the agent's pod; wait until the DaemonSet's new one is Ready."""
    (old,) = await ready_pods(api, "kube-system", "gpupool-agent")
    await api.delete(f"/api/v1/namespaces/kube-system/pods/{old['metadata']['name']}")

    async def replaced() -> bool:
        pods = await ready_pods(api, "kube-system", "gpupool-agent")
        return [pod["metadata"]["uid"] for pod in pods] not in ([], [old["metadata"]["uid"]])

    await wait_for(replaced, 300, "the agent's new pod Ready")


Fault = Callable[[Cluster, KubeAPI], Awaitable[None]]
FAULTS: dict[str, Fault] = {
    "containerd stopped": restart_containerd,
    "containerd killed": crash_containerd,
    "kubelet killed": crash_kubelet,
    "agent": restart_agent,
}


async def admits_a_new_share(
    cluster: Cluster, tenant: KubeAPI, namespace: str, name: str
) -> dict[str, str]:
    """A new share pod is bound, admitted and started, and sees exactly its GPU with caps."""
    image = cluster.images.test_workload
    await tenant.create(
        f"/api/v1/namespaces/{namespace}/pods",
        workload_pod(name, image, f"{INSPECT}\n{DONE}", SHARE),
    )
    seen = await pod_log(tenant, namespace, name)
    await expect_exactly_its_gpus(cluster, tenant, namespace, name, seen)
    assert env_in(seen)["CUDA_DEVICE_SM_LIMIT"] == "10", seen
    return seen


@pytest.mark.timeout(2400)
async def test_running_pods_keep_their_gpus_through_restarts_and_nothing_leaks(
    installed: Cluster, api: KubeAPI
) -> None:
    cluster = installed
    await published(api, cluster.node.name, CAPACITY)
    image = cluster.images.test_workload
    async with tenants(cluster, api, "faults") as made:
        [(namespace, tenant)] = made
        for name, limits in WATCHED.items():
            await tenant.create(
                f"/api/v1/namespaces/{namespace}/pods", workload_pod(name, image, WATCH, limits)
            )
        views = await views_of(tenant, namespace)
        for name, (_, view) in views.items():
            await expect_exactly_its_gpus(cluster, tenant, namespace, name, view)
        assert env_in(views["share"][1])["CUDA_DEVICE_SM_LIMIT"] == "10"
        assert not any(key.startswith("CUDA_DEVICE_") for key in env_in(views["whole"][1]))
        states = await container_states(tenant, namespace)
        assert all(restarts == 0 and running for _, restarts, running in states.values())
        tokens = {env_in(view)["GPUPOOL_HANDOFF_TOKEN"] for _, view in views.values()}
        for fault, restart in FAULTS.items():
            await restart(cluster, api)
            await published(api, cluster.node.name, CAPACITY)
            # the running containers are the very same, and see the same GPUs and caps
            assert await container_states(tenant, namespace) == states, fault
            for name, (_, view) in views.items():
                printed, _ = await latest_view(tenant, namespace, name)
                _, now = await latest_view(tenant, namespace, name, after=printed)
                assert now == view, (fault, name, now)
            # the agent still knows their grants (a restarting container would need them)
            kept = handoff_tokens(cluster)
            assert all(kept.get(token, {}).get("grant") for token in tokens), (fault, kept)
            assert all(spec_path(cluster.node.cdi_dir, token).exists() for token in tokens)
            seen = await admits_a_new_share(
                cluster, tenant, namespace, "after-" + fault.replace(" ", "-")
            )
            tokens.add(env_in(seen)["GPUPOOL_HANDOFF_TOKEN"])
            states = await container_states(tenant, namespace)
            views = await views_of(tenant, namespace)
        assert not failed_admission(await list_pods(tenant, namespace))
        assert len(containers_of(cluster, namespace)) == 2 * len(states)  # with sandboxes
    await nothing_left(cluster, api, namespace, tokens)


async def nothing_left(cluster: Cluster, api: KubeAPI, namespace: str, tokens: set[str]) -> None:
    """The pods' containers, CDI specs, own files and hand-off entries all go."""

    def leftovers() -> dict[str, object]:
        cdi = cluster.node.cdi_dir
        left = {
            "containers": containers_of(cluster, namespace),
            "specs": [t for t in tokens if spec_path(cdi, t).exists()],
            "files": [t for t in tokens if files_path(cdi, t).exists()],
            "handoff": sorted(tokens & set(handoff_tokens(cluster))),
        }
        return {what: found for what, found in left.items() if found}

    async def clean() -> bool:
        return not leftovers()

    try:
        await wait_for(clean, COLLECT_AFTER + 240, "the ended pods' leftovers removed")
    except AssertionError:
        raise AssertionError(f"left behind: {leftovers()}") from None
    await published(api, cluster.node.name, CAPACITY)


async def lease_holder(api: KubeAPI) -> str:
    return str((await api.get(LEASE))["spec"].get("holderIdentity", ""))


async def api_endpoints(api: KubeAPI) -> list[str]:
    """The pods behind the chart's API Service, ready ones only, as its EndpointSlices say."""
    listing = await api.get(
        f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
        {"labelSelector": "kubernetes.io/service-name=gpupool-scheduler"},
    )
    return sorted(
        endpoint["targetRef"]["name"]
        for endpoint_slice in listing["items"]
        for endpoint in endpoint_slice.get("endpoints") or []
        if endpoint.get("conditions", {}).get("ready")
    )


async def serves_alone(api: KubeAPI, pod: str) -> None:
    """Wait until the API Service sends its readers to ``pod`` and to no other replica."""

    async def alone() -> bool:
        return await api_endpoints(api) == [pod]

    await wait_for(alone, 60, f"the API Service on {pod} alone")


async def whole_pods(tenant: KubeAPI, namespace: str, names: list[str], image: str) -> None:
    """Create whole-GPU pods and wait until every one runs."""
    for name in names:
        await tenant.create(
            f"/api/v1/namespaces/{namespace}/pods", workload_pod(name, image, DONE, WHOLE)
        )

    async def running() -> bool:
        pods = {p["metadata"]["name"]: p for p in await list_pods(tenant, namespace)}
        assert not failed_admission(list(pods.values())), failed_admission(list(pods.values()))
        return all(pods[name]["status"].get("phase") == "Running" for name in names)

    await wait_for(running, 600, f"{len(names)} whole-GPU pods Running")


async def binders(api: KubeAPI, namespace: str, count: int) -> dict[str, str]:
    """Which replica bound each pod: the ``reportingInstance`` of its Scheduled Event."""
    found: dict[str, str] = {}

    async def reported() -> bool:
        nonlocal found
        events = (await api.get(f"/api/v1/namespaces/{namespace}/events"))["items"]
        found = {
            e["involvedObject"]["name"]: e.get("reportingInstance", "")
            for e in events
            if e["reason"] == "Scheduled"
        }
        return len(found) >= count

    await wait_for(reported, 120, f"{count} Scheduled Events in {namespace}")
    return found


@pytest.mark.timeout(1800)
async def test_the_standby_takes_over_when_the_leaders_pod_is_killed(
    installed: Cluster, api: KubeAPI
) -> None:
    cluster = installed
    image = cluster.images.test_workload
    chart_deployment = await api.get(f"{DEPLOYMENTS}/gpupool-scheduler")
    await api.create(DEPLOYMENTS, standby_of(chart_deployment, free_port()))
    namespace, tenant = await tenant_namespace(cluster, api, "failover")
    try:

        async def both_ready() -> bool:
            return len(await ready_pods(api, NAMESPACE, "gpupool-scheduler")) == 2

        await wait_for(both_ready, 300, "the leader and the standby Ready")
        pods = await ready_pods(api, NAMESPACE, "gpupool-scheduler")
        (standby,) = [p for p in pods if STANDBY_LABEL in p["metadata"]["labels"]]
        (leader,) = [p for p in pods if p is not standby]
        leader_name, standby_name = leader["metadata"]["name"], standby["metadata"]["name"]
        assert await lease_holder(api) == leader_name
        await serves_alone(api, leader_name)  # the standby has no snapshot to show readers
        await whole_pods(tenant, namespace, [f"before-{i}" for i in range(GPUS - 2)], image)
        await api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{leader_name}")

        async def taken_over() -> bool:
            return bool(await lease_holder(api) == standby_name)

        await wait_for(taken_over, 60, "the standby holding the Lease")
        await serves_alone(api, standby_name)
        await whole_pods(tenant, namespace, ["after-0", "after-1"], image)
        # the standby knew what the old leader gave: every GPU went to one pod only
        names = [p["metadata"]["name"] for p in await list_pods(tenant, namespace)]
        given = [await expected_gpus(tenant, namespace, name) for name in names]
        assert len(set().union(*given)) == len(given) == GPUS, given
        by = await binders(tenant, namespace, GPUS)
        assert {by[name] for name in names if name.startswith("before-")} == {leader_name}, by
        assert {by["after-0"], by["after-1"]} == {standby_name}, by
        await tenant.create(
            f"/api/v1/namespaces/{namespace}/pods", workload_pod("one-more", image, DONE, WHOLE)
        )
        condition = await pending_reason(tenant, namespace, "one-more")
        assert condition["reason"] == "Unschedulable", condition
        assert await lease_holder(api) == standby_name  # and still leads
    finally:
        await tenant.close()
        await remove_namespace(api, namespace)
        await remove_standby(api)
