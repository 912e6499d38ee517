"""Live scheduling throughput: gpupool's scheduler against kube-scheduler on one real control plane.

The simulator's speed says how fast the policy decides; this says how fast pods get bound in a
real cluster, where every decision is a Binding through the API server and the scheduler first
has to list and watch everything. Both schedulers get the same conditions in the same run: a
fresh etcd + kube-apiserver + kwok, N fresh kwok nodes with 8 GPUs, P pods asking for one GPU
each, all created *before* the scheduler starts (so creation speed does not cap the rate). The
clock starts when the scheduler process is launched, so start-up, the initial list and cache sync
are part of the number, as they are when a scheduler restarts in a real cluster; the rate from
the first to the last bind is reported as well.

Bind times come from one watch on the namespace, stamped when the event arrives here. The
gpupool phase also checks what it bound: every pod carries a ``gpupool.io/allocation`` record
for its node, with the right GPU count, and no (node, GPU index) pair is given twice.

Between the two phases the first phase's pods and nodes are deleted, so both schedulers see a
cluster of the same size (kube-scheduler's adaptive ``percentageOfNodesToScore`` depends on the
node count); odd runs measure gpupool first, even runs kube-scheduler first.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2

from gpupool.bench.machine import machine_description
from gpupool.devcluster.controlplane import LocalControlPlane, SchedulerClient
from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.devcluster.processes import ManagedProcess, StartError
from gpupool.devcluster.session import wait_nodes_ready
from gpupool.kube.api import ApiError, JsonObject, KubeAPI
from gpupool.kube.vocabulary import (
    ANNOTATION_ALLOCATION,
    ANNOTATION_GPU_UUIDS,
    RESOURCE_GPU,
    SCHEDULER_NAME,
)

GPUPOOL = "gpupool"
KUBE_SCHEDULER = "kube-scheduler"
SCHEDULERS = (GPUPOOL, KUBE_SCHEDULER)
GPUPOOL_PROCESS = "gpupool-scheduler"
POD_IMAGE = "registry.k8s.io/pause:3.10"

Log = Callable[[str], None]


class LiveBenchError(RuntimeError):
    """The benchmark could not run (a scheduler missing or dead, pods never bound)."""


@dataclass(frozen=True, slots=True)
class LiveConfig:
    """One ``bench live`` invocation.

    Attributes:
        nodes: Fresh kwok nodes per phase.
        pods: Pods per phase, one GPU each.
        gpus_per_node: GPUs per node.
        runs: Independent runs, each on a fresh control plane.
        schedulers: Which phases to run, in order (``gpupool``, ``kube-scheduler``).
        concurrency: Concurrent create requests.
        timeout: Seconds a scheduler gets to bind every pod before the run fails.
        kube_qps: kube-scheduler client QPS.
        kube_burst: kube-scheduler client burst.
        gpupool_args: Extra arguments for ``gpupool control-plane`` (``--log-level warning``).
        max_foreign_cpu: A run in which other processes used more than this share of the CPUs
            while a scheduler was binding is set aside and run again (1.0: never).
        retries: How many runs may be set aside that way in all.
    """

    nodes: int = 1000
    pods: int = 5000
    gpus_per_node: int = 8
    runs: int = 3
    schedulers: tuple[str, ...] = SCHEDULERS
    concurrency: int = 16
    timeout: float = 900.0
    kube_qps: int = 5000
    kube_burst: int = 5000
    gpupool_args: tuple[str, ...] = ()
    max_foreign_cpu: float = 0.1
    retries: int = 3

    def validate(self) -> None:
        """Raise ``ValueError`` naming the CLI option of a bad value."""
        if self.nodes < 1:
            raise ValueError("--nodes: must be >= 1")
        if self.pods < 1:
            raise ValueError("--pods: must be >= 1")
        if self.gpus_per_node < 1:
            raise ValueError("--gpus-per-node: must be >= 1")
        if self.pods > self.nodes * self.gpus_per_node:
            raise ValueError(
                f"--pods: {self.pods} one-GPU pods do not fit on {self.nodes} nodes x "
                f"{self.gpus_per_node} GPUs"
            )
        if self.runs < 1:
            raise ValueError("--runs: must be >= 1")
        if not self.schedulers or any(s not in SCHEDULERS for s in self.schedulers):
            raise ValueError(f"--schedulers: choose from {', '.join(SCHEDULERS)}")
        if self.concurrency < 1:
            raise ValueError("--concurrency: must be >= 1")
        if self.timeout <= 0:
            raise ValueError("--timeout: must be > 0")
        if not 0 < self.max_foreign_cpu <= 1:
            raise ValueError("--max-foreign-cpu: must be in (0, 1]")
        if self.retries < 0:
            raise ValueError("--retries: must be >= 0")


# --- what the cluster gets -------------------------------------------------------------------


def bench_nodes(label: str, count: int, gpus: int) -> list[FakeGpuNode]:
    """``count`` fresh 8-GPU kwok nodes named ``<label>-node-0000``..., labelled bench=label."""
    width = max(4, len(str(count - 1)))
    return [
        FakeGpuNode(f"{label}-node-{i:0{width}d}", gpus=gpus, labels=(("bench", label),))
        for i in range(count)
    ]


def pod_manifest(name: str, scheduler: str, node_selector: dict[str, str] | None) -> JsonObject:
    """A one-GPU pod for ``scheduler`` (``gpupool`` or ``kube-scheduler``)."""
    spec: JsonObject = {
        "containers": [
            {"name": "main", "image": POD_IMAGE, "resources": {"limits": {RESOURCE_GPU: "1"}}}
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler == GPUPOOL:
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
    """Delete a phase's pods (no grace) and nodes, and wait until they are gone.

    A collection delete of thousands of pods can outlast the API server's 60 s request timeout
    on a busy machine (504); the server goes on deleting, so a 5xx only means: wait, and ask
    again every 30 s until nothing is left.
    """
    targets = (
        (f"/api/v1/namespaces/{namespace}/pods", {"gracePeriodSeconds": "0"}),
        ("/api/v1/nodes", {"labelSelector": f"bench={label}"}),
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
        while time.monotonic() - asked < 30.0:
            pods = await api.get(targets[0][0], {"limit": "1"})
            nodes = await api.get(
                "/api/v1/nodes", {"labelSelector": f"bench={label}", "limit": "1"}
            )
            if not pods["items"] and not nodes["items"]:
                return
            if time.monotonic() > deadline:
                raise LiveBenchError(
                    f"{namespace}: pods or nodes still there after {timeout:.0f} s"
                )
            await asyncio.sleep(0.5)


# --- watching binds --------------------------------------------------------------------------


class BindWatcher:
    """Stamps the moment each pod of a namespace is first seen with ``spec.nodeName``.

    Args:
        api: Client.
        namespace: Namespace to watch.
        expected: Stop once this many pods are bound.
    """

    def __init__(self, api: KubeAPI, namespace: str, expected: int) -> None:
        self.api = api
        self.namespace = namespace
        self.expected = expected
        self.bound: dict[str, float] = {}
        """Pod name -> ``time.monotonic()`` when its bind was seen."""
        self.watching = asyncio.Event()
        self.done = asyncio.Event()
        self.events = 0

    def _see(self, pod: JsonObject, now: float) -> None:
        name = pod["metadata"]["name"]
        if pod.get("spec", {}).get("nodeName") and name not in self.bound:
            self.bound[name] = now
            if len(self.bound) >= self.expected:
                self.done.set()

    async def _list(self) -> str:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        listing = await self.api.get(path)
        now = time.monotonic()
        for pod in listing["items"]:
            self._see(pod, now)
        return str(listing["metadata"]["resourceVersion"])

    async def run(self) -> None:
        """List, then watch (re-listing on 410 Gone) until ``expected`` pods are bound."""
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        version = await self._list()
        while not self.done.is_set():
            params = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true"}
            try:
                async with self.api.stream(path, params) as response:
                    self.watching.set()
                    async for line in response.aiter_lines():
                        if not line:
                            continue
                        now = time.monotonic()
                        event = json.loads(line)
                        pod = event["object"]
                        if event["type"] == "ERROR":
                            raise ApiError(pod.get("code", 500), pod.get("reason", ""), "watch")
                        self.events += 1
                        version = pod["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._see(pod, now)
                        if self.done.is_set():
                            return
            except ApiError as error:
                if error.status != 410:
                    raise
                version = await self._list()


# --- reading processes -----------------------------------------------------------------------


def proc_status_kib(pid: int, key: str) -> int | None:
    """A ``/proc/<pid>/status`` field in KiB (``VmRSS``, ``VmHWM``), or None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process, from ``/proc/<pid>/stat``."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def machine_busy_cpu_seconds() -> float:
    """CPU seconds every CPU of the machine spent busy since boot (``/proc/stat``)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds(plane: LocalControlPlane) -> dict[str, float]:
    """CPU seconds used so far by this process (``bench``) and each running child of the plane."""
    times = os.times()
    used = {"bench": times.user + times.system}
    for name, child in list(plane.processes.items()):
        seconds = proc_cpu_seconds(child.process.pid) if child.running else None
        if seconds is not None:
            used[name] = seconds
    return used


@dataclass
class CpuWindow:
    """How busy the machine was during a timed window, who used it, and how much was not us.

    On a shared machine (CI, colleagues' tests) other processes steal CPU from a 2-core control
    plane; ``foreign_fraction`` says how much, so a disturbed run can be told from a slow one.
    The per-process seconds show where the CPU went (API server, etcd, kwok, scheduler).
    """

    plane: LocalControlPlane
    began: float = 0.0
    busy: float = 0.0
    own: dict[str, float] = field(default_factory=dict)

    def start(self) -> None:
        """Take the first reading."""
        self.began = time.monotonic()
        self.busy = machine_busy_cpu_seconds()
        self.own = own_cpu_seconds(self.plane)

    def finish(self) -> dict[str, Any]:
        """Busy and foreign shares of all CPUs since :meth:`start` (0..1), seconds by process."""
        elapsed = max(time.monotonic() - self.began, 1e-6)
        capacity = elapsed * (os.cpu_count() or 1)
        busy = machine_busy_cpu_seconds() - self.busy
        now = own_cpu_seconds(self.plane)
        used = {name: round(now[name] - self.own.get(name, 0.0), 2) for name in now}
        return {
            "seconds": round(elapsed, 2),
            "busy_fraction": round(min(busy / capacity, 1.0), 3),
            "foreign_fraction": round(max(busy - sum(used.values()), 0.0) / capacity, 3),
            "cpu_seconds_by_process": used,
        }


def peak_rss_mib(plane: LocalControlPlane) -> dict[str, float | None]:
    """VmHWM (peak resident set) of every running control-plane process, in MiB."""
    peaks: dict[str, float | None] = {}
    for name, child in plane.processes.items():
        kib = proc_status_kib(child.process.pid, "VmHWM") if child.running else None
        peaks[name] = round(kib / 1024, 1) if kib is not None else None
    return peaks


# --- the phases ------------------------------------------------------------------------------


def gpupool_scheduler_command(kubeconfig: Path, extra: Sequence[str] = ()) -> list[str]:
    """How the gpupool scheduler is started: its own process, as a deployment would."""
    command = [sys.executable, "-m", "gpupool", "control-plane", "--kubeconfig", str(kubeconfig)]
    return [*command, *extra]


def gpupool_scheduler_available() -> str | None:
    """None when ``gpupool control-plane`` exists here, else why it cannot run."""
    if importlib.util.find_spec("gpupool.kube.service") is None:
        return "gpupool.kube.service does not exist yet"
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


def start_gpupool_scheduler(plane: LocalControlPlane, extra: Sequence[str] = ()) -> ManagedProcess:
    """Launch ``gpupool control-plane`` against the plane; ``plane.stop()`` stops it too."""
    process = ManagedProcess(
        GPUPOOL_PROCESS,
        gpupool_scheduler_command(plane.kubeconfig, extra),
        plane.folder / f"{GPUPOOL_PROCESS}.log",
    )
    plane.processes[GPUPOOL_PROCESS] = process
    return process


def start_scheduler(
    plane: LocalControlPlane,
    scheduler: str,
    client: SchedulerClient,
    gpupool_args: Sequence[str] = (),
) -> str:
    """Start one scheduler (blocking until kube-scheduler is healthy); its process name."""
    if scheduler == GPUPOOL:
        start_gpupool_scheduler(plane, gpupool_args)
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


def check_allocations(
    pods: Sequence[JsonObject], node_uuids: dict[str, list[str]], gpus_per_pod: int = 1
) -> dict[str, Any]:
    """Check the allocation records the gpupool scheduler wrote onto the pods it bound.

    Every bound pod must carry ``gpupool.io/allocation`` (JSON, ``{"node": ..., "gpus":
    [{"index": ..., "uuid": ...}]}``) naming its node, with ``gpus_per_pod`` GPUs whose indexes
    exist on the node and whose UUIDs, when given, match the node's inventory; no (node, index)
    pair may be handed out twice.

    Returns:
        Counts of each problem, up to five examples of each, and ``ok``.
    """
    problems: dict[str, list[str]] = {
        "unbound": [],
        "missing_annotation": [],
        "unreadable_annotation": [],
        "node_mismatch": [],
        "wrong_gpu_count": [],
        "unknown_gpu": [],
        "uuid_mismatch": [],
    }
    holders: dict[tuple[str, int], list[str]] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        node = pod.get("spec", {}).get("nodeName")
        if not node:
            problems["unbound"].append(name)
            continue
        text = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_ALLOCATION)
        if text is None:
            problems["missing_annotation"].append(name)
            continue
        try:
            record = json.loads(text)
            gpus = [(int(gpu["index"]), str(gpu.get("uuid", ""))) for gpu in record["gpus"]]
            record_node = record["node"]
        except (ValueError, KeyError, TypeError):
            problems["unreadable_annotation"].append(name)
            continue
        if record_node != node:
            problems["node_mismatch"].append(f"{name}: {record_node} != {node}")
        if len(gpus) != gpus_per_pod:
            problems["wrong_gpu_count"].append(f"{name}: {len(gpus)}")
        inventory = node_uuids.get(node, [])
        for index, uuid in gpus:
            holders.setdefault((node, index), []).append(name)
            if not 0 <= index < len(inventory):
                problems["unknown_gpu"].append(f"{name}: {node}/{index}")
            elif uuid and uuid != inventory[index]:
                problems["uuid_mismatch"].append(f"{name}: {uuid} != {inventory[index]}")
    doubles = {f"{n}/{i}": names for (n, i), names in holders.items() if len(names) > 1}
    report: dict[str, Any] = {"pods_checked": len(pods), "gpus_allocated": len(holders)}
    for key, found in problems.items():
        report[key] = len(found)
        if found:
            report[f"{key}_examples"] = found[:5]
    report["gpus_given_twice"] = len(doubles)
    if doubles:
        report["gpus_given_twice_examples"] = dict(list(doubles.items())[:5])
    report["ok"] = not doubles and not any(problems.values())
    return report


def check_node_counts(pods: Sequence[JsonObject], allowed: dict[str, int]) -> dict[str, Any]:
    """Pods per node against the node's GPUs, and pods bound outside the phase's nodes."""
    per_node = Counter(pod["spec"].get("nodeName") for pod in pods if pod["spec"].get("nodeName"))
    over = {node: n for node, n in per_node.items() if n > allowed.get(node, 0)}
    foreign = [node for node in per_node if node not in allowed]
    return {
        "nodes_used": len(per_node),
        "max_pods_on_a_node": max(per_node.values(), default=0),
        "overcommitted_nodes": len(over),
        "pods_on_other_nodes": sum(per_node[node] for node in foreign),
        "ok": not over and not foreign,
    }


@dataclass
class PhaseResult:
    """One scheduler's numbers in one run (seconds; wall-clock stamps in ISO 8601, UTC)."""

    scheduler: str
    namespace: str
    nodes: int
    pods: int
    bound: int = 0
    complete: bool = False
    create_nodes_seconds: float = 0.0
    nodes_ready_seconds: float = 0.0
    create_pods_seconds: float = 0.0
    scheduler_started: str = ""
    first_bind: str = ""
    last_bind: str = ""
    seconds_to_first_bind: float | None = None
    seconds_to_last_bind: float | None = None
    pods_per_second: float | None = None
    pods_per_second_first_to_last: float | None = None
    scheduler_cpu_seconds: float | None = None
    scheduler_peak_rss_mib: float | None = None
    cpu_while_binding: dict[str, Any] = field(default_factory=dict)
    watch_events: int = 0
    node_counts: dict[str, Any] = field(default_factory=dict)
    allocations: dict[str, Any] | None = None
    error: str | None = None


def _iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds")


async def run_phase(
    plane: LocalControlPlane,
    api: KubeAPI,
    scheduler: str,
    config: LiveConfig,
    log: Log,
) -> PhaseResult:
    """Nodes, pods, then the scheduler; time the binds; stop the scheduler; check the result."""
    label = "gpupool" if scheduler == GPUPOOL else "kube"
    namespace = f"bench-{label}"
    result = PhaseResult(scheduler, namespace, config.nodes, config.pods)
    await create_namespace(api, namespace)

    nodes = bench_nodes(label, config.nodes, config.gpus_per_node)
    began = time.monotonic()
    await create_nodes(api, nodes, config.concurrency)
    result.create_nodes_seconds = round(time.monotonic() - began, 3)
    await wait_nodes_ready(api, config.nodes, f"bench={label}", timeout=600.0)
    result.nodes_ready_seconds = round(time.monotonic() - began, 3)
    log(
        f"{scheduler}: {config.nodes} nodes created in {result.create_nodes_seconds:.1f} s, "
        f"Ready after {result.nodes_ready_seconds:.1f} s"
    )

    selector = {"bench": "kube"} if scheduler == KUBE_SCHEDULER else None
    width = len(str(config.pods - 1))
    manifests = (pod_manifest(f"p-{i:0{width}d}", scheduler, selector) for i in range(config.pods))
    began = time.monotonic()
    await create_pods(api, namespace, manifests, config.concurrency)
    result.create_pods_seconds = round(time.monotonic() - began, 3)
    log(
        f"{scheduler}: {config.pods} pods created in {result.create_pods_seconds:.1f} s "
        f"({config.pods / result.create_pods_seconds:.0f}/s)"
    )

    watcher = BindWatcher(api, namespace, config.pods)
    watch = asyncio.create_task(watcher.run())
    name = GPUPOOL_PROCESS if scheduler == GPUPOOL else KUBE_SCHEDULER
    client = SchedulerClient(qps=config.kube_qps, burst=config.kube_burst)
    start_wall, start = time.time(), time.monotonic()
    try:
        await asyncio.wait_for(watcher.watching.wait(), 60.0)
        window = CpuWindow(plane)
        window.start()
        start_wall, start = time.time(), time.monotonic()
        starting = asyncio.create_task(
            asyncio.to_thread(start_scheduler, plane, scheduler, client, config.gpupool_args)
        )
        await _wait_for_binds(plane, name, watcher, watch, starting, start + config.timeout)
        result.cpu_while_binding = window.finish()
    except (LiveBenchError, StartError) as error:
        result.error = str(error)
        log(f"{scheduler}: FAILED: {error}")
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        child = plane.processes.get(name)
        if child is not None and child.running:
            result.scheduler_cpu_seconds = proc_cpu_seconds(child.process.pid)
            kib = proc_status_kib(child.process.pid, "VmHWM")
            result.scheduler_peak_rss_mib = round(kib / 1024, 1) if kib is not None else None
        await asyncio.to_thread(plane.stop_process, name)

    times = sorted(watcher.bound.values())
    result.bound = len(times)
    result.watch_events = watcher.events
    result.complete = result.bound == config.pods and result.error is None
    if times:
        first, last = times[0], times[-1]
        result.scheduler_started = _iso(start_wall)
        result.first_bind = _iso(start_wall + first - start)
        result.last_bind = _iso(start_wall + last - start)
        result.seconds_to_first_bind = round(first - start, 3)
        result.seconds_to_last_bind = round(last - start, 3)
        if result.complete:
            result.pods_per_second = round(config.pods / (last - start), 1)
            if last > first:
                result.pods_per_second_first_to_last = round((config.pods - 1) / (last - first), 1)

    listing = await api.get(f"/api/v1/namespaces/{namespace}/pods")
    pods = listing["items"]
    result.node_counts = check_node_counts(pods, {n.name: n.gpus for n in nodes})
    if scheduler == GPUPOOL:
        inventory = {
            n.name: [f"GPU-{n.name}-{i}" for i in range(n.gpus)] for n in nodes
        }  # what FakeGpuNode publishes in gpupool.io/gpu-uuids
        nodes_listing = await api.get("/api/v1/nodes", {"labelSelector": f"bench={label}"})
        for node in nodes_listing["items"]:
            uuids = (node["metadata"].get("annotations") or {}).get(ANNOTATION_GPU_UUIDS, "")
            inventory[node["metadata"]["name"]] = uuids.split(",") if uuids else []
        result.allocations = check_allocations(pods, inventory)
    log(
        f"{scheduler}: {result.bound}/{config.pods} bound; "
        f"{_fmt(result.pods_per_second)} pods/s from launch, "
        f"{_fmt(result.pods_per_second_first_to_last)} pods/s first to last bind, "
        f"first bind after {_fmt(result.seconds_to_first_bind)} s; CPU busy "
        f"{result.cpu_while_binding.get('busy_fraction', 0):.0%}, of which others "
        f"{result.cpu_while_binding.get('foreign_fraction', 0):.0%}"
    )
    return result


async def _wait_for_binds(
    plane: LocalControlPlane,
    name: str,
    watcher: BindWatcher,
    watch: asyncio.Task[None],
    starting: asyncio.Task[str],
    deadline: float,
) -> None:
    """Until every pod is bound; fail early if the watch or the scheduler dies, or at deadline."""
    while not watcher.done.is_set():
        if watch.done():
            watch.result()  # raises what stopped the watch
            raise LiveBenchError(f"{watcher.namespace}: the watch ended early")
        if starting.done():
            starting.result()  # raises StartError if kube-scheduler never became healthy
            child = plane.processes.get(name)
            if child is not None and not child.running:
                raise LiveBenchError(
                    f"{name} exited with {child.process.returncode}:\n{child.log_tail()}"
                )
        if time.monotonic() > deadline:
            raise LiveBenchError(
                f"{name}: only {len(watcher.bound)} of {watcher.expected} pods bound by the "
                "deadline"
            )
        await asyncio.sleep(0.2)
    await starting


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


async def _run_phases(
    plane: LocalControlPlane, config: LiveConfig, order: Sequence[str], log: Log
) -> tuple[dict[str, PhaseResult], dict[str, float]]:
    api = KubeAPI.from_kubeconfig(plane.kubeconfig, timeout=120.0)
    results: dict[str, PhaseResult] = {}
    cleanups: dict[str, float] = {}
    try:
        for index, scheduler in enumerate(order):
            results[scheduler] = await run_phase(plane, api, scheduler, config, log)
            if index + 1 < len(order):
                label = "gpupool" if scheduler == GPUPOOL else "kube"
                began = time.monotonic()
                await delete_phase(api, f"bench-{label}", label)
                cleanups[scheduler] = round(time.monotonic() - began, 3)
                log(f"{scheduler}: pods and nodes deleted in {cleanups[scheduler]:.1f} s")
    finally:
        await api.close()
    return results, cleanups


def run_once(config: LiveConfig, index: int, log: Log) -> dict[str, Any]:
    """One run on a fresh control plane (etcd, kube-apiserver, kwok), every phase in order."""
    started = time.time()
    load = os.getloadavg()
    source = source_state()
    # Odd runs go in the given order, even runs reversed: the second phase meets an etcd and a
    # kwok that have seen the first, so a fixed order would favour one scheduler.
    order = config.schedulers if index % 2 else tuple(reversed(config.schedulers))
    plane = LocalControlPlane()
    try:
        plane.start()
        plane.start_kwok()
        log(f"run {index}: control plane up in {time.time() - started:.1f} s ({plane.folder})")
        results, cleanups = asyncio.run(_run_phases(plane, config, order, log))
        peaks = peak_rss_mib(plane)
    finally:
        plane.stop()
    return {
        "run": index,
        "started": _iso(started),
        "wall_seconds": round(time.time() - started, 1),
        "loadavg_before": [round(x, 2) for x in load],
        "gpupool_source": source,
        "order": list(order),
        "phases": {name: asdict(result) for name, result in results.items()},
        "cleanup_seconds": cleanups,
        "control_plane_peak_rss_mib": peaks,
    }


# --- the report ------------------------------------------------------------------------------


def binary_versions(bin_dir: Path) -> dict[str, str]:
    """``--version`` of each control-plane binary."""
    versions: dict[str, str] = {}
    for name in ("etcd", "kube-apiserver", "kube-scheduler", "kwok"):
        try:
            done = subprocess.run(
                [str(bin_dir / name), "--version"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
            versions[name] = (done.stdout or done.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            versions[name] = "unknown"
    return versions


def source_state() -> dict[str, Any]:
    """Which gpupool was measured: git commit, uncommitted changes, a hash of the sources."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    state: dict[str, Any] = {"sources_sha256": digest.hexdigest()[:16]}
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=package,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "."],
            cwd=package,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if head.returncode == 0:
            state["git_commit"] = head.stdout.strip()
            state["uncommitted_files"] = len(dirty.stdout.splitlines())
    except (OSError, subprocess.TimeoutExpired):
        pass
    return state


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 1) if present else None


def live_report(config: LiveConfig, runs: list[dict[str, Any]], bin_dir: Path) -> dict[str, Any]:
    """The JSON report: medians over runs, every run, the setup, the machine."""

    def per_run(scheduler: str, key: str) -> list[float | None]:
        return [run["phases"].get(scheduler, {}).get(key) for run in runs]

    report: dict[str, Any] = {"benchmark": "live_throughput", "nodes": config.nodes}
    report["pods"] = config.pods
    report["gpus_per_node"] = config.gpus_per_node
    report["runs"] = len(runs)
    report["failed_runs"] = [run["run"] for run in runs if run.get("error")]
    for scheduler in SCHEDULERS:
        key = scheduler.replace("-", "_")
        if scheduler in config.schedulers:
            report[f"{key}_pods_per_second"] = _median(per_run(scheduler, "pods_per_second"))
            report[f"{key}_pods_per_second_first_to_last"] = _median(
                per_run(scheduler, "pods_per_second_first_to_last")
            )
            report[f"{key}_pods_per_second_per_run"] = per_run(scheduler, "pods_per_second")
            report[f"{key}_foreign_cpu_per_run"] = [
                run["phases"]
                .get(scheduler, {})
                .get("cpu_while_binding", {})
                .get("foreign_fraction")
                for run in runs
            ]
            report[f"{key}_complete_runs"] = sum(
                1 for run in runs if run["phases"].get(scheduler, {}).get("complete")
            )
    checks = [run["phases"][GPUPOOL]["allocations"] for run in runs if GPUPOOL in run["phases"]]
    report["gpupool_allocations_ok"] = all(c and c["ok"] for c in checks) if checks else None
    report["setup"] = {
        "pod": f"one container, limits {{{RESOURCE_GPU}: 1}}, created before the scheduler starts",
        "nodes": f"fresh kwok nodes per phase, {config.gpus_per_node} GPUs, labelled bench=<phase>",
        "gpupool": {
            "namespace": "bench-gpupool",
            "schedulerName": SCHEDULER_NAME,
            "command": " ".join(
                ("python -m gpupool control-plane --kubeconfig <kubeconfig>", *config.gpupool_args)
            ),
        },
        "kube_scheduler": {
            "namespace": "bench-kube",
            "schedulerName": "default-scheduler",
            "nodeSelector": {"bench": "kube"},
            "qps": config.kube_qps,
            "burst": config.kube_burst,
            "profile": "default-scheduler with the default plugins",
            "percentageOfNodesToScore": "default (0: adaptive)",
            "feasible_nodes_looked_for": kube_nodes_to_find(config.nodes),
            "parallelism": "default (16)",
            "leader_election": False,
        },
        "between_phases": "the first phase's pods and nodes are deleted",
        "order": "as given in odd runs, reversed in even runs",
        "rate_from_launch": "pods / (last bind - scheduler process launched)",
        "rate_first_to_last": "(pods - 1) / (last bind - first bind)",
        "bind_time": "when the watch event with spec.nodeName reached the bench process",
        "foreign_cpu": "share of all CPUs used by processes outside the run while binding",
        "max_foreign_cpu": config.max_foreign_cpu,
        "disturbed_runs": "runs above max_foreign_cpu, set aside and repeated (at most "
        f"{config.retries}); kept under disturbed_runs, not in the medians",
        "concurrency": config.concurrency,
        "timeout_seconds": config.timeout,
    }
    report["machine"] = machine_description()
    report["binaries"] = binary_versions(bin_dir)
    report["gpupool_source"] = source_state()
    report["per_run"] = runs
    return report


def run_live(config: LiveConfig, log: Log) -> dict[str, Any]:
    """Every run, then the report.

    Raises:
        LiveBenchError: gpupool was asked for and ``gpupool control-plane`` is not there.
    """
    from gpupool.devcluster.binaries import find_binaries

    config.validate()
    bin_dir = find_binaries()
    if GPUPOOL in config.schedulers:
        missing = gpupool_scheduler_available()
        if missing is not None:
            raise LiveBenchError(
                f"the gpupool scheduler cannot run: {missing}; "
                "use --schedulers kube-scheduler to measure kube-scheduler alone"
            )
    started = time.time()
    runs: list[dict[str, Any]] = []
    disturbed: list[dict[str, Any]] = []
    index = 0
    while len(runs) < config.runs:
        index += 1
        try:
            run = run_once(config, index, log)
        except (ApiError, StartError, TimeoutError, LiveBenchError, httpx2.HTTPError) as error:
            log(f"run {index}: FAILED: {error}")  # keep the other runs' numbers
            run = {"run": index, "error": f"{type(error).__name__}: {error}", "phases": {}}
        foreign = max(
            (p["cpu_while_binding"].get("foreign_fraction", 0.0) for p in run["phases"].values()),
            default=0.0,
        )
        if foreign > config.max_foreign_cpu and len(disturbed) < config.retries:
            log(f"run {index}: other processes used {foreign:.0%} of the CPUs; running it again")
            disturbed.append(run)
            continue
        runs.append(run)
    report = live_report(config, runs, bin_dir)
    report["disturbed_runs"] = disturbed
    report["started"] = _iso(started)
    report["finished"] = _iso(time.time())
    report["wall_seconds"] = round(time.time() - started, 1)
    return report


def report_ok(report: dict[str, Any]) -> bool:
    """Every run finished, every phase bound every pod, every gpupool allocation was right."""
    phases = [phase for run in report["per_run"] for phase in run["phases"].values()]
    return (
        not report["failed_runs"]
        and all(phase["complete"] for phase in phases)
        and report["gpupool_allocations_ok"] is not False
    )


def format_table(report: dict[str, Any]) -> str:
    """A short plain-text table of the medians."""
    rows = [
        (
            "scheduler",
            "pods/s from launch",
            "pods/s first-last",
            "per run",
            "others' CPU per run",
            "complete",
        )
    ]
    for scheduler in SCHEDULERS:
        key = scheduler.replace("-", "_")
        if f"{key}_pods_per_second" not in report:
            continue
        rows.append(
            (
                scheduler,
                _fmt(report[f"{key}_pods_per_second"]),
                _fmt(report[f"{key}_pods_per_second_first_to_last"]),
                ", ".join(_fmt(v) for v in report[f"{key}_pods_per_second_per_run"]),
                ", ".join(
                    "n/a" if v is None else f"{v:.0%}" for v in report[f"{key}_foreign_cpu_per_run"]
                ),
                f"{report[f'{key}_complete_runs']}/{report['runs']}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        f"{report['pods']} one-GPU pods on {report['nodes']} nodes x {report['gpus_per_node']} "
        f"GPUs, median of {report['runs']} run(s), {report['machine']['usable_cpus']} CPUs"
    ]
    for row in rows:
        lines.append("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    if report["failed_runs"]:
        lines.append(f"FAILED runs: {report['failed_runs']} (see per_run)")
    ok = report["gpupool_allocations_ok"]
    if ok is not None:
        lines.append(f"gpupool allocations: {'ok' if ok else 'PROBLEMS (see per_run)'}")
    return "\n".join(lines)
