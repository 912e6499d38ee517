"""``gpupool demo --kube``: the demo's workload on a real local control plane.

The same ten nodes, pools, queues and teams as the embedded demo (:mod:`gpupool.sim.demo.workload`,
``configs/demo.yaml``), but every part is real except the nodes: etcd, kube-apiserver and kwok
(fake nodes that run pods), the CRDs and the allocation admission policy, ``gpupool
control-plane`` as its own process under exactly its RBAC role (the scheduler, the metrics and
the dashboard on ``--port``), and a ``gpupool agent`` with a fake NVML for each H100 node
publishing its inventory. The demo creates the arriving pods through the API at accelerated
time and ends each after its run time (kwok's ``gpupool.io/finish`` stage), so pods bind,
finish and wait exactly as they would in a cluster.

It needs the control-plane binaries; when they are missing it says how to build them.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gpupool.core.model import NodeSpec, PodSpec, RequestKind
from gpupool.devcluster.binaries import find_binaries
from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.devcluster.processes import ManagedProcess
from gpupool.devcluster.session import SCHEDULER_USER, wait_nodes_ready
from gpupool.kube.client.api import ApiError, JsonObject, KubeAPI
from gpupool.kube.install.admission_policy import DEFAULT_AGENT_IDENTITIES
from gpupool.kube.install.crds import install_crds
from gpupool.kube.install.rbac import grant_scheduler_role
from gpupool.kube.objects.vocabulary import (
    LABEL_CLASS,
    LABEL_QUEUE,
    RESOURCE_GPU,
    RESOURCE_GPU_CORES,
    RESOURCE_GPU_MEMORY,
    RESOURCE_MIG_PREFIX,
    SCHEDULER_NAME,
)
from gpupool.sim.demo.embedded import Submission
from gpupool.sim.demo.session import STEP_SECONDS, demo_config_text
from gpupool.sim.demo.workload import DemoArrivals, demo_nodes

FINISH_ANNOTATION = "gpupool.io/finish"
"""kwok's ``pod-finish`` stage ends a running pod that carries this annotation."""
PRIORITY_CLASS = "gpupool-demo-"
_PLURALS = {"GPUPool": "gpupools", "GPUQueue": "gpuqueues"}


def fake_node(spec: NodeSpec) -> FakeGpuNode:
    """The kwok node for one of the demo's nodes."""
    return FakeGpuNode(
        spec.name,
        gpus=spec.gpu_count,
        gpu_model=spec.gpu_model or "A100",
        gpu_memory_mib=spec.gpu_memory_mib or 81920,
        cpu=spec.cpu_milli // 1000,
        memory_gib=spec.memory_mib // 1024,
        labels=spec.labels,
        mig=spec.mig_slices,
    )


def pod_manifest(submission: Submission) -> tuple[str, JsonObject]:
    """The namespace and Pod object for one arriving pod of the bundled workload."""
    workload = submission.workload
    pod: PodSpec = workload.pod
    limits: dict[str, str] = {}
    if pod.kind is RequestKind.MIG:
        limits[f"{RESOURCE_MIG_PREFIX}{pod.mig_profile}"] = "1"
    elif pod.gpu_count:
        limits[RESOURCE_GPU] = str(pod.gpu_count)
        if pod.kind is RequestKind.SHARE:
            limits[RESOURCE_GPU_CORES] = str(pod.gpu_milli // 10)
            limits[RESOURCE_GPU_MEMORY] = str(pod.gpu_memory_mib)
    name = re.sub(r"[^a-z0-9-]", "-", pod.name.split("/", 1)[-1].lower())
    spec: JsonObject = {
        "schedulerName": SCHEDULER_NAME,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/gpupool-demo:latest",
                "resources": {
                    "limits": limits,
                    "requests": {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"},
                },
            }
        ],
    }
    if workload.priority:
        spec["priorityClassName"] = f"{PRIORITY_CLASS}{workload.priority}"
    labels = {LABEL_CLASS: workload.workload_class, LABEL_QUEUE: workload.namespace}
    return workload.namespace, {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


async def _create(api: KubeAPI, path: str, body: JsonObject) -> None:
    try:
        await api.create(path, body)
    except ApiError as error:
        if error.status != 409:
            raise


async def populate(kubeconfig: Path) -> None:
    """CRDs, the admission policy, the scheduler's role, nodes, pools, queues, namespaces."""
    api = KubeAPI.from_kubeconfig(kubeconfig)
    try:
        await install_crds(
            api,
            scheduler_identities=(SCHEDULER_USER,),
            agent_identities=DEFAULT_AGENT_IDENTITIES,
        )
        await grant_scheduler_role(api, SCHEDULER_USER)
        nodes = [fake_node(spec) for spec in demo_nodes()]
        await create_nodes(api, nodes)
        await wait_nodes_ready(api, len(nodes))
        for document in yaml.safe_load_all(demo_config_text()):
            plural = _PLURALS[document["kind"]]
            await _create(api, f"/apis/gpupool.io/v1alpha1/{plural}", document)
            for namespace in document["spec"].get("namespaces", ()):
                await _create(api, "/api/v1/namespaces", {"metadata": {"name": namespace}})
        for value in (50,):
            await _create(
                api,
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {"metadata": {"name": f"{PRIORITY_CLASS}{value}"}, "value": value},
            )
    finally:
        await api.close()


class KubeDemo:
    """Arrivals into the API at accelerated time, and their ends."""

    def __init__(self, api: KubeAPI, seed: int) -> None:
        self.api = api
        self.arrivals = DemoArrivals(seed)
        self.now = 0.0
        self.ends: list[tuple[float, str, str]] = []
        self.created = 0

    async def step(self) -> None:
        """One scheduling step of simulated time: create arrivals, finish what is due."""
        for submission in self.arrivals.arrivals(self.now, STEP_SECONDS):
            namespace, pod = pod_manifest(submission)
            await _create(self.api, f"/api/v1/namespaces/{namespace}/pods", pod)
            self.created += 1
            name = pod["metadata"]["name"]
            heapq.heappush(self.ends, (self.now + submission.duration, namespace, name))
        self.now += STEP_SECONDS
        while self.ends and self.ends[0][0] <= self.now:
            _, namespace, name = heapq.heappop(self.ends)
            path = f"/api/v1/namespaces/{namespace}/pods/{name}"
            with contextlib.suppress(ApiError):  # not bound yet or gone: nothing to end
                pod = await self.api.get(path)
                if pod["status"].get("phase") == "Running":
                    body = {"metadata": {"annotations": {FINISH_ANNOTATION: "succeeded"}}}
                    await self.api.patch(path, body)
                else:
                    heapq.heappush(self.ends, (self.now + STEP_SECONDS, namespace, name))


async def _run(
    kubeconfig: Path, speed: float, seed: int, duration: float, say: Callable[[str], None]
) -> None:
    api = KubeAPI.from_kubeconfig(kubeconfig)
    demo = KubeDemo(api, seed)
    started = last = time.monotonic()
    try:
        while duration <= 0 or time.monotonic() - started < duration:
            await demo.step()
            await asyncio.sleep(STEP_SECONDS / speed)
            if time.monotonic() - last >= 5.0:
                last = time.monotonic()
                say(await _summary(api, demo))
    finally:
        await api.close()


async def _summary(api: KubeAPI, demo: KubeDemo) -> str:
    pods: list[Any] = await api.list_items("/api/v1/pods")
    phases: dict[str, int] = {}
    for pod in pods:
        bound = "bound" if pod["spec"].get("nodeName") else "pending"
        phase = pod["status"].get("phase", "Pending") if bound == "bound" else bound
        phases[phase] = phases.get(phase, 0) + 1
    counts = ", ".join(f"{count} {phase}" for phase, count in sorted(phases.items()))
    clock = time.strftime("%H:%M:%S", time.gmtime(demo.now))
    return f"t={clock} simulated | {demo.created} pods created | {counts}"


def run_kube_demo(
    port: int, speed: float, seed: int, duration: float, say: Callable[[str], None]
) -> None:
    """Start everything, run the workload, stop everything (also on Ctrl-C)."""
    find_binaries()  # fails first, with how to build them
    plane = LocalControlPlane()
    try:
        say(f"starting etcd, kube-apiserver and kwok in {plane.folder} ...")
        plane.start()
        plane.start_kwok()
        say("installing the CRDs and the admission policy; creating nodes, pools and queues ...")
        asyncio.run(populate(plane.kubeconfig))
        scheduler_config = plane.user_kubeconfig(SCHEDULER_USER)
        plane.processes["gpupool-control-plane"] = ManagedProcess(
            "gpupool-control-plane",
            [
                sys.executable,
                "-m",
                "gpupool",
                "control-plane",
                "--kubeconfig",
                str(scheduler_config),
                "--http-address",
                f"127.0.0.1:{port}",
                "--insecure-local",  # the dashboard for this machine's user, without a token
            ],
            plane.folder / "gpupool-control-plane.log",
        )
        for spec in demo_nodes():
            if spec.gpu_model != "H100":
                continue
            state = plane.folder / "agents" / spec.name
            state.mkdir(parents=True)
            plane.processes[f"agent-{spec.name}"] = ManagedProcess(
                f"agent-{spec.name}",
                [
                    sys.executable,
                    "-m",
                    "gpupool",
                    "agent",
                    "--node-name",
                    spec.name,
                    "--fake-gpus",
                    "h100",
                    "--kubeconfig",
                    str(plane.kubeconfig),
                    "--plugin-dir",
                    str(state / "plugins"),
                    "--plugins-registry-dir",
                    str(state / "plugins_registry"),
                    "--plugins-dir",
                    str(state / "dra-plugins"),
                    "--pod-resources-socket",
                    str(state / "pod-resources.sock"),
                    "--cdi-dir",
                    str(state / "cdi"),
                    "--state-dir",
                    str(state),
                    "--mps-root",
                    str(state / "mps"),
                    "--metrics-port",
                    "0",
                    "--publish-allocatable",
                ],
                plane.folder / f"agent-{spec.name}.log",
            )
        url = f"http://127.0.0.1:{port}"
        say(f"dashboard: {url}  kubeconfig: {plane.kubeconfig}  (Ctrl-C stops everything)")
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_run(plane.kubeconfig, speed, seed, duration, say))
    finally:
        say("stopping ...")
        plane.stop()
