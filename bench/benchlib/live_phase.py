"""One phase of ``bench live``: one scheduler binds one set of identical pods, timed and checked.

Nodes and pods are created first, the informer has listed them, and only then is the scheduler
launched, so the clock covers exactly what a restarting scheduler does: start, list, bind. After
the last bind the result is checked from the cluster's own records (pods per node against GPUs,
and for gpupool the shared allocation checker), so a fast but wrong scheduler cannot pass.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchlib.allocation_check import check_allocations, inventory
from benchlib.binds import BindTimes
from benchlib.live_claims import BENCH_DRIVER, check_claims, prepare_claims
from benchlib.live_config import LiveConfig
from benchlib.live_gangs import check_gangs, create_groups, gang_of, with_gang
from benchlib.live_report import fmt, iso
from benchlib.live_rules import check_rule_groups, pod_rule, with_rule
from benchlib.live_setup import (
    CLAIM_PHASES,
    GPUPOOL,
    GPUPOOL_CLAIMS,
    GPUPOOL_PHASES,
    GPUPOOL_PROCESS,
    KUBE_SCHEDULER,
    PHASE_LABEL,
    LiveBenchError,
    bench_nodes,
    create_namespace,
    create_pods,
    phase_label,
    pod_manifest,
    start_scheduler,
)
from benchlib.procstats import CpuWindow, proc_cpu_seconds, rss_mib
from gpupool.devcluster.controlplane import LocalControlPlane, SchedulerClient
from gpupool.devcluster.fakenodes import create_nodes
from gpupool.devcluster.processes import StartError
from gpupool.devcluster.session import wait_nodes_ready
from gpupool.kube.client.api import JsonObject, KubeAPI
from gpupool.kube.objects.dra.records import DRIVER

Log = Callable[[str], None]


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
    rule_groups: dict[str, Any] = field(default_factory=dict)
    gangs: dict[str, Any] = field(default_factory=dict)
    allocations: dict[str, Any] | None = None
    error: str | None = None


async def run_phase(
    plane: LocalControlPlane, api: KubeAPI, scheduler: str, config: LiveConfig, log: Log
) -> PhaseResult:
    """Nodes, pods, then the scheduler; time the binds; stop the scheduler; check the result."""
    label = phase_label(scheduler)
    namespace = f"bench-{label}"
    result = PhaseResult(scheduler, namespace, config.nodes, config.pods)
    await create_namespace(api, namespace)

    nodes = bench_nodes(label, config.nodes, config.gpus_per_node)
    began = time.monotonic()
    await create_nodes(api, nodes, config.concurrency)
    result.create_nodes_seconds = round(time.monotonic() - began, 3)
    await wait_nodes_ready(api, config.nodes, f"{PHASE_LABEL}={label}", timeout=600.0)
    result.nodes_ready_seconds = round(time.monotonic() - began, 3)
    log(
        f"{scheduler}: {config.nodes} nodes created in {result.create_nodes_seconds:.1f} s, "
        f"Ready after {result.nodes_ready_seconds:.1f} s"
    )

    selector = {PHASE_LABEL: label}  # every scheduler's pods: confined to their phase's nodes
    width = len(str(config.pods - 1))
    names = [f"p-{i:0{width}d}" for i in range(config.pods)]
    claims = scheduler in CLAIM_PHASES
    driver = DRIVER if scheduler == GPUPOOL_CLAIMS else BENCH_DRIVER
    began = time.monotonic()
    if claims:  # a claim per pod, named after it, and the slices of the phase's nodes
        await prepare_claims(
            api, namespace, nodes, names, (PHASE_LABEL, label), config.concurrency, driver
        )
        log(f"{scheduler}: slices and claims created in {time.monotonic() - began:.1f} s")
    if config.gangs:
        await create_groups(api, namespace, config.pods, config.gangs, config.concurrency)
    manifests = (
        with_gang(
            with_rule(
                pod_manifest(name, scheduler, selector, name if claims else ""),
                pod_rule(index, config.pod_rules, config.nodes),
            ),
            gang_of(index, config.gangs),
        )
        for index, name in enumerate(names)
    )
    began = time.monotonic()
    await create_pods(api, namespace, manifests, config.concurrency)
    result.create_pods_seconds = round(time.monotonic() - began, 3)
    log(
        f"{scheduler}: {config.pods} pods created in {result.create_pods_seconds:.1f} s "
        f"({config.pods / result.create_pods_seconds:.0f}/s)"
    )

    binds = BindTimes(api, namespace, config.pods)
    watch = asyncio.create_task(binds.run())
    name = GPUPOOL_PROCESS if scheduler in GPUPOOL_PHASES else KUBE_SCHEDULER
    client = SchedulerClient(qps=config.kube_qps, burst=config.kube_burst)
    start_wall, start = time.time(), time.monotonic()
    try:
        await asyncio.wait_for(binds.synced.wait(), 60.0)
        window = CpuWindow(plane)
        window.start()
        start_wall, start = time.time(), time.monotonic()
        starting = asyncio.create_task(
            asyncio.to_thread(start_scheduler, plane, scheduler, client, config.gpupool_args)
        )
        await _wait_for_binds(plane, name, binds, watch, starting, start + config.timeout)
        result.cpu_while_binding = window.finish()
    except (LiveBenchError, StartError, TimeoutError) as error:
        result.error = f"{type(error).__name__}: {error}"
        log(f"{scheduler}: FAILED: {error}")
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        child = plane.processes.get(name)
        if child is not None and child.running:
            result.scheduler_cpu_seconds = proc_cpu_seconds(child.process.pid)
            result.scheduler_peak_rss_mib = rss_mib(child.process.pid, "VmHWM")
        await asyncio.to_thread(plane.stop_process, name)

    _rates(result, sorted(binds.bound.values()), start, start_wall)
    result.watch_events = binds.events
    pods = await api.list_items(f"/api/v1/namespaces/{namespace}/pods")
    result.node_counts = check_node_counts(pods, {n.name: n.gpus for n in nodes})
    if config.pod_rules:
        result.rule_groups = check_rule_groups(pods)
    if config.gangs:
        result.gangs = check_gangs(pods)
    if scheduler == GPUPOOL:
        phase_nodes = await api.list_items(f"/api/v1/nodes?labelSelector={PHASE_LABEL}%3D{label}")
        result.allocations = check_allocations(pods, inventory(phase_nodes)).summary()
    elif claims:
        result.allocations = await check_claims(api, namespace, pods, (PHASE_LABEL, label), driver)
    log(
        f"{scheduler}: {result.bound}/{config.pods} bound; "
        f"{fmt(result.pods_per_second)} pods/s from launch, "
        f"{fmt(result.pods_per_second_first_to_last)} pods/s first to last bind, "
        f"first bind after {fmt(result.seconds_to_first_bind)} s; CPU busy "
        f"{result.cpu_while_binding.get('busy_fraction', 0):.0%}, of which others "
        f"{result.cpu_while_binding.get('foreign_fraction', 0):.0%}"
    )
    return result


def _rates(result: PhaseResult, times: list[float], start: float, start_wall: float) -> None:
    """Fill in the bind count, the stamps and the two rates from the sorted bind times."""
    result.bound = len(times)
    result.complete = result.bound == result.pods and result.error is None
    if not times:
        return
    first, last = times[0], times[-1]
    result.scheduler_started = iso(start_wall)
    result.first_bind = iso(start_wall + first - start)
    result.last_bind = iso(start_wall + last - start)
    result.seconds_to_first_bind = round(first - start, 3)
    result.seconds_to_last_bind = round(last - start, 3)
    if result.complete:
        result.pods_per_second = round(result.pods / (last - start), 1)
        if last > first:
            result.pods_per_second_first_to_last = round((result.pods - 1) / (last - first), 1)


async def _wait_for_binds(
    plane: LocalControlPlane,
    name: str,
    binds: BindTimes,
    watch: asyncio.Task[None],
    starting: asyncio.Task[str],
    deadline: float,
) -> None:
    """Until every pod is bound; fail early if the watch or the scheduler dies, or at deadline."""
    while not binds.done.is_set():
        if watch.done():
            watch.result()  # raises what stopped the informer
            raise LiveBenchError(f"{binds.namespace}: the watch ended early")
        if starting.done():
            starting.result()  # raises StartError if kube-scheduler never became healthy
            child = plane.processes.get(name)
            if child is not None and not child.running:
                raise LiveBenchError(
                    f"{name} exited with {child.process.returncode}:\n{child.log_tail()}"
                )
        if time.monotonic() > deadline:
            raise LiveBenchError(
                f"{name}: only {len(binds.bound)} of {binds.expected} pods bound by the deadline"
            )
        await asyncio.sleep(0.2)
    await starting
