"""What a live benchmark puts into the cluster, and how it starts and removes a scheduler.

Both schedulers in ``bench live`` must meet the same cluster, or the comparison measures the
set-up rather than the scheduler: so both phases get nodes from :func:`bench_nodes` (one shape,
labelled ``bench=<phase>``) and pods from :func:`pod_manifest` (one shape, each confined to its
phase's nodes by the same kind of ``nodeSelector``; the review found only kube-scheduler's pods
carried one). The memory benchmarks reuse the same nodes, pods and launchers.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from benchlib.live_claims import RESOURCE
from gpupool.devcluster.controlplane import LocalControlPlane, SchedulerClient
from gpupool.devcluster.fakenodes import FakeGpuNode
from gpupool.devcluster.processes import ManagedProcess
from gpupool.kube.client.api import MERGE_PATCH, ApiError, JsonObject, KubeAPI
from gpupool.kube.objects.dra.records import SLICES_PATH
from gpupool.kube.objects.vocabulary import RESOURCE_GPU, SCHEDULER_NAME

GPUPOOL = "gpupool"
KUBE_SCHEDULER = "kube-scheduler"
GPUPOOL_CLAIMS = "gpupool-claims"
"""gpupool's scheduler with ``--claims``, the pods asking by ResourceClaim
(:mod:`benchlib.live_claims`)."""
KUBE_CLAIMS = "kube-scheduler-claims"
"""kube-scheduler's own DRA allocator on the same claim pods, for a driver of the bench's
(:data:`benchlib.live_claims.BENCH_DRIVER`): what the DRA protocol costs any scheduler."""
SCHEDULERS = (GPUPOOL, KUBE_SCHEDULER, GPUPOOL_CLAIMS, KUBE_CLAIMS)
DEFAULT_SCHEDULERS = (GPUPOOL, KUBE_SCHEDULER)
GPUPOOL_PHASES = (GPUPOOL, GPUPOOL_CLAIMS)
CLAIM_PHASES = (GPUPOOL_CLAIMS, KUBE_CLAIMS)
LABELS = {
    GPUPOOL: "gpupool",
    KUBE_SCHEDULER: "kube",
    GPUPOOL_CLAIMS: "claims",
    KUBE_CLAIMS: "kclaims",
}
GPUPOOL_PROCESS = "gpupool-scheduler"
POD_IMAGE = "registry.k8s.io/pause:3.10"
PHASE_LABEL = "bench"


class LiveBenchError(RuntimeError):
    """The benchmark could not run (a scheduler missing or dead, pods never bound)."""


def phase_label(scheduler: str) -> str:
    """The label value, node prefix and namespace suffix of a scheduler's phase."""
    return LABELS[scheduler]


def bench_nodes(label: str, count: int, gpus: int) -> list[FakeGpuNode]:
    """``count`` fresh kwok nodes named ``<label>-node-0000``..., labelled ``bench=<label>``."""
    width = max(4, len(str(count - 1)))
    return [
        FakeGpuNode(f"{label}-node-{i:0{width}d}", gpus=gpus, labels=((PHASE_LABEL, label),))
        for i in range(count)
    ]


def pod_manifest(
    name: str, scheduler: str, node_selector: dict[str, str] | None, claim: str = ""
) -> JsonObject:
    """A one-GPU pod for ``scheduler`` (one of :data:`SCHEDULERS`).

    Only ``schedulerName`` differs between gpupool's and kube-scheduler's pods; a ``claim`` pod
    asks for its GPU through that ResourceClaim instead of ``gpupool.io/gpu``.
    """
    resources: JsonObject = (
        {"claims": [{"name": "gpu"}]} if claim else {"limits": {RESOURCE_GPU: "1"}}
    )
    spec: JsonObject = {
        "containers": [{"name": "main", "image": POD_IMAGE, "resources": resources}],
        "terminationGracePeriodSeconds": 0,
    }
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    if scheduler in GPUPOOL_PHASES:
        spec["schedulerName"] = SCHEDULER_NAME
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": spec,
    }


async def create_namespace(api: KubeAPI, name: str) -> None:
    """Create a namespace (no error if it exists)."""
    try:
        await api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
    except ApiError as error:
        if error.status != 409:
            raise


async def create_pods(
    api: KubeAPI, namespace: str, pods: Iterable[JsonObject], concurrency: int
) -> None:
    """Create the pods, ``concurrency`` requests at a time."""
    await api.create_all(f"/api/v1/namespaces/{namespace}/pods", pods, concurrency)


async def delete_phase(api: KubeAPI, namespace: str, label: str, timeout: float = 600.0) -> None:
    """Delete a phase's pods (no grace), nodes, claims and slices, and wait until they are gone.

    A collection delete of thousands of pods can outlast the API server's 60 s request timeout
    on a busy machine (504); the server goes on deleting, so a 5xx only means: wait, and ask
    again every 30 s until nothing is left.
    """
    selector = f"{PHASE_LABEL}={label}"
    targets: tuple[tuple[str, dict[str, str]], ...] = (
        (f"/api/v1/namespaces/{namespace}/pods", {"gracePeriodSeconds": "0"}),
        ("/api/v1/nodes", {"labelSelector": selector}),
        (f"{RESOURCE}/namespaces/{namespace}/resourceclaims", {}),
        (SLICES_PATH, {"labelSelector": selector}),
    )
    deadline = time.monotonic() + timeout
    while True:
        asked = time.monotonic()
        for path, params in targets:
            try:
                await api.request("DELETE", path, params=params)
            except ApiError as error:
                if error.status < 500:
                    raise
        await _drop_claim_finalizers(api, f"{RESOURCE}/namespaces/{namespace}/resourceclaims")
        while time.monotonic() - asked < 30.0:
            left = [
                await api.get(path, {"limit": "1", **_selector_only(params)})
                for path, params in targets
            ]
            if not any(found["items"] for found in left):
                return
            if time.monotonic() > deadline:
                raise LiveBenchError(
                    f"{namespace}: pods or nodes still there after {timeout:.0f} s"
                )
            await asyncio.sleep(0.5)


async def _drop_claim_finalizers(api: KubeAPI, path: str, concurrency: int = 16) -> None:
    """Clear the finalizers of the claims under ``path``, so that their deletion completes.

    kube-scheduler puts ``resource.kubernetes.io/delete-protection`` on every claim it
    allocates, and only kube-controller-manager's resourceclaim controller, which the bench does
    not run, takes it off: without this the kube-scheduler claim phase's claims never go.
    """
    held = [c for c in await api.list_items(path) if c["metadata"].get("finalizers")]
    gate = asyncio.Semaphore(concurrency)

    async def drop(claim: JsonObject) -> None:
        async with gate:
            try:
                await api.request(
                    "PATCH",
                    f"{path}/{claim['metadata']['name']}",
                    body={"metadata": {"finalizers": None}},
                    content_type=MERGE_PATCH,
                )
            except ApiError as error:
                if error.status != 404:
                    raise

    await asyncio.gather(*(drop(claim) for claim in held))


def _selector_only(params: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in params.items() if key == "labelSelector"}


def gpupool_scheduler_command(kubeconfig: Path, extra: Sequence[str] = ()) -> list[str]:
    """How the gpupool scheduler is started: its own process, as a deployment would.

    Its HTTP endpoints go on a free port, so that a bench never fails on a port still held.
    """
    command = [
        *(sys.executable, "-m", "gpupool", "control-plane", "--kubeconfig", str(kubeconfig)),
        *("--http-address", "127.0.0.1:0"),
    ]
    return [*command, *extra]


def gpupool_scheduler_available() -> str | None:
    """None when ``gpupool control-plane`` exists here, else why it cannot run."""
    if importlib.util.find_spec("gpupool.kube.controlplane.service") is None:
        return "gpupool.kube.controlplane.service does not exist yet"
    done = subprocess.run(
        [sys.executable, "-m", "gpupool", "control-plane", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        return f"`gpupool control-plane --help` failed: {done.stderr.strip()[-300:]}"
    return None


def start_gpupool_scheduler(
    plane: LocalControlPlane, extra: Sequence[str] = (), name: str = GPUPOOL_PROCESS
) -> ManagedProcess:
    """Launch ``gpupool control-plane`` against the plane; ``plane.stop()`` stops it too."""
    process = ManagedProcess(
        name, gpupool_scheduler_command(plane.kubeconfig, extra), plane.folder / f"{name}.log"
    )
    plane.processes[name] = process
    return process


def start_scheduler(
    plane: LocalControlPlane,
    scheduler: str,
    client: SchedulerClient,
    gpupool_args: Sequence[str] = (),
) -> str:
    """Start one scheduler (blocking until kube-scheduler is healthy); its process name."""
    if scheduler in GPUPOOL_PHASES:
        claims = ("--claims",) if scheduler == GPUPOOL_CLAIMS else ()
        start_gpupool_scheduler(plane, [*gpupool_args, *claims])
        return GPUPOOL_PROCESS
    plane.start_kube_scheduler(client)
    return KUBE_SCHEDULER


def kube_nodes_to_find(total_nodes: int, percentage: int = 0) -> int:
    """How many feasible nodes kube-scheduler looks for before scoring (numFeasibleNodesToFind).

    With ``percentageOfNodesToScore`` unset (0) the percentage is adaptive: 50% minus one point
    per 125 nodes, at least 5%; never fewer than 100 nodes.
    """
    if total_nodes < 100:
        return total_nodes
    if percentage <= 0:
        percentage = max(5, 50 - total_nodes // 125)
    return max(100, total_nodes * percentage // 100)
