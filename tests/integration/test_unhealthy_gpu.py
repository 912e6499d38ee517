"""A broken GPU on a real API server: the agent reports it, no pod goes there, its pod is told."""

from __future__ import annotations

from pathlib import Path

from gpupool.agent.fakenvml import FakeNvml
from gpupool.agent.handoff import HandoffConfig
from gpupool.agent.service import Agent, AgentConfig
from gpupool.kube.client.api import KubeAPI

from .live_helpers import (
    NoKubelet,
    SchedulerProcesses,
    assert_no_gpu_given_twice,
    create_pods,
    events_about,
    gpu_pod,
    list_pods,
    make_nodes,
    pending_reason,
    pod_allocation,
    wait_for,
)


async def _unhealthy_events(api: KubeAPI, namespace: str, name: str) -> list[str]:
    events = await events_about(api, namespace, name)
    return [e["note"] for e in events if e["reason"] == "GPUUnhealthy"]


async def test_no_pod_goes_to_an_unhealthy_gpu_and_the_pod_on_it_gets_one_event(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses, tmp_path: Path
) -> None:
    [fake] = await make_nodes(api, namespace, 1, gpus=4, gpu_model="T4", gpu_memory_mib=15360)
    selector = {"test": namespace}
    nvml = FakeNvml.preset("t4", fake.name)  # the same UUIDs as the fake node's
    config = AgentConfig(
        handoff=HandoffConfig(fake.name, tmp_path / "cdi", tmp_path / "state"),
        publish_allocatable=True,
        pool_period=0,
        dra=None,
    )
    agent = Agent(config, nvml, api, NoKubelet())
    await agent.refresh_inventory()
    await create_pods(api, namespace, [gpu_pod("first", cores=30, selector=selector)])
    schedulers.start("solo")

    async def first_bound() -> bool:
        [pod] = await list_pods(api, namespace)
        return pod_allocation(pod) is not None

    await wait_for(first_bound, 30, "the first pod to bind")
    [first] = await list_pods(api, namespace)
    allocation = pod_allocation(first)
    assert allocation is not None
    broken = allocation["gpus"][0]["uuid"]

    nvml.inject_xid(broken, 79)  # "GPU has fallen off the bus": the agent marks it unhealthy
    assert nvml.wait_xid(1000) is not None
    await agent.refresh_inventory()

    async def told() -> bool:
        return bool(await _unhealthy_events(api, namespace, "first"))

    await wait_for(told, 30, "the GPUUnhealthy Event on the first pod")
    [note] = await _unhealthy_events(api, namespace, "first")
    assert broken in note

    # The whole pods bind before the share arrives: created together, the share could be
    # ordered first (same second, and "share" < "whole") and rightly take a healthy GPU.
    wholes = [gpu_pod(f"whole-{i}", gpus=1, selector=selector) for i in range(3)]
    await create_pods(api, namespace, wholes)

    async def all_bound() -> bool:
        pods = await list_pods(api, namespace)
        return len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods)

    await wait_for(all_bound, 30, "the whole pods to bind")
    await create_pods(api, namespace, [gpu_pod("share", cores=30, selector=selector)])

    async def share_settled() -> bool:
        pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
        share = pods.get("share")
        return share is not None and bool(share["spec"].get("nodeName") or pending_reason(share))

    await wait_for(share_settled, 30, "the share pod (room only on the broken GPU) to settle")
    by_name = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
    for name in ("whole-0", "whole-1", "whole-2"):
        placed = pod_allocation(by_name[name])
        assert placed is not None, pending_reason(by_name[name])
        assert placed["gpus"][0]["uuid"] != broken
    assert not by_name["share"]["spec"].get("nodeName")
    assert "unhealthy" in pending_reason(by_name["share"]), pending_reason(by_name["share"])
    assert (await list_pods(api, namespace))[0]["spec"].get("nodeName")  # first keeps running
    await assert_no_gpu_given_twice(api, by_name.values())
    # rebuilds and cycles since (five pods' worth) did not repeat the Event
    assert len(await _unhealthy_events(api, namespace, "first")) == 1
