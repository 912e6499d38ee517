"""Helpers for live-scheduler tests: pod manifests, scheduler processes, waiting, invariants."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.kube.allocation_check import check_allocations, inventory
from gpupool.kube.api import KubeAPI

Json = dict[str, Any]


def gpu_pod(
    name: str,
    *,
    gpus: int = 1,
    memory_mib: int = 0,
    cores: int = 0,
    models: str = "",
    selector: dict[str, str] | None = None,
    finish: bool = False,
    scheduler: str = "gpupool",
) -> Json:
    limits: dict[str, str] = {"gpupool.io/gpu": str(gpus)} if gpus else {}
    if memory_mib:
        limits["gpupool.io/gpu-memory"] = str(memory_mib)
    if cores:
        limits["gpupool.io/gpu-cores"] = str(cores)
    annotations = {"gpupool.io/gpu-model": models} if models else {}
    if finish:
        annotations["gpupool.io/finish"] = "succeeded"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": selector or {},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/cuda:latest",
                    "resources": {"limits": limits, "requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    }


async def create_pods(api: KubeAPI, namespace: str, pods: Iterable[Json]) -> None:
    await api.create_all(f"/api/v1/namespaces/{namespace}/pods", pods, concurrency=32)


async def list_pods(api: KubeAPI, namespace: str) -> list[Json]:
    return await api.list_items(f"/api/v1/namespaces/{namespace}/pods")


async def wait_for(
    check: Callable[[], Awaitable[bool]], timeout: float, what: str, interval: float = 0.3
) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(interval)


async def make_nodes(api: KubeAPI, label: str, count: int, **shape: Any) -> list[FakeGpuNode]:
    nodes = [
        FakeGpuNode(f"{label}-n{i:03d}", labels=(("test", label),), **shape) for i in range(count)
    ]
    await create_nodes(api, nodes)
    return nodes


def pod_allocation(pod: Json) -> Json | None:
    text = pod["metadata"].get("annotations", {}).get("gpupool.io/allocation")
    return json.loads(text) if text else None


def pending_reason(pod: Json) -> str:
    for condition in pod["status"].get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return str(condition.get("message", ""))
    return ""


async def assert_no_gpu_given_twice(api: KubeAPI, pods: Iterable[Json]) -> int:
    """The shared checker's rules hold for these pods on the cluster's nodes; GPUs in use.

    See :mod:`gpupool.kube.allocation_check`: no GPU over 1000 milli or its memory, whole GPUs
    exclusive, every bound pod with a record naming its node.
    """
    check = check_allocations(pods, inventory(await api.list_items("/api/v1/nodes")))
    assert check.ok, check.message()
    return check.gpus_used


@dataclass
class SchedulerProcesses:
    """``gpupool control-plane`` replicas started by a test; all killed at teardown."""

    kubeconfig: Path
    lease_name: str
    log_dir: Path
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, identity: str) -> subprocess.Popen[bytes]:
        with (self.log_dir / f"{identity}.log").open("ab") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gpupool",
                    "control-plane",
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--identity",
                    identity,
                    "--lease-name",
                    self.lease_name,
                    "--lease-duration",
                    "4",
                    "--renew-deadline",
                    "3",
                    "--retry-period",
                    "0.5",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.running[identity] = process
        return process

    def kill(self, identity: str) -> None:
        process = self.running.pop(identity)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for process in self.running.values():
            process.terminate()
        for process in self.running.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        self.running.clear()

    def log(self, identity: str) -> str:
        return (self.log_dir / f"{identity}.log").read_text(errors="replace")
