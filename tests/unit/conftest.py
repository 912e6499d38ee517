"""Shared helpers for the unit tests.

With ``--import-mode=importlib`` test modules cannot import this file, so the helpers are handed
out as session-scoped fixtures (session scope keeps them usable from hypothesis tests).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpupool.core.model import PodSpec, RequestKind
from gpupool.core.snapshot import ClusterSnapshot

FeasibleFn = Callable[[ClusterSnapshot, PodSpec, int], bool]


def reference_feasible(snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> bool:
    """Whether ``node`` can take ``pod``, re-derived in plain Python from the node spec.

    Mirrors placement-benchmark.md section 2.2 (CPU, memory, pod slots, GPU model, enough GPUs
    with the per-GPU share free) plus gpupool's GPU memory and MIG checks, and kube's extra
    resources and host ports (:func:`reference_extras_fit`).
    """
    spec = snapshot.nodes[node]
    if not reference_extras_fit(snapshot, pod, node):
        return False
    if int(snapshot.cpu_free[node]) < pod.cpu_milli:
        return False
    if int(snapshot.memory_free[node]) < pod.memory_mib:
        return False
    if int(snapshot.pods_free[node]) < 1:
        return False
    kind = pod.kind
    if kind is RequestKind.MIG:
        if pod.mig_profile not in snapshot.mig_profiles:
            return False
        column = snapshot.mig_profiles.index(pod.mig_profile)
        return int(snapshot.mig_free[node, column]) >= 1
    if kind is RequestKind.NONE:
        return True
    if spec.gpu_count == 0:
        return False
    if pod.gpu_models and spec.gpu_model not in pod.gpu_models:
        return False
    fitting = 0
    for gpu in range(spec.gpu_count):
        if int(snapshot.gpu_free[node, gpu]) < pod.gpu_milli:
            continue
        if pod.gpu_memory_mib and int(snapshot.gpu_memory_free[node, gpu]) < pod.gpu_memory_mib:
            continue
        fitting += 1
    return fitting >= pod.gpu_count


def reference_extras_fit(snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> bool:
    """kube's NodeResourcesFit for extra resources and NodePorts, from the node spec and the
    pods bound there: allocatable (zero when absent) less what they hold, and no host port of
    the same protocol and number where either IP is ``0.0.0.0`` or both are equal."""
    held = [snapshot.allocations[name].pod for name in snapshot.pods_on_node[node]]
    allocatable = dict(snapshot.nodes[node].extra_resources)
    for name, amount in pod.extra_resources:
        used = sum(dict(other.extra_resources).get(name, 0) for other in held)
        if allocatable.get(name, 0) - used < amount:
            return False
    for port in pod.host_ports:
        for other in held:
            for taken in other.host_ports:
                same = (taken.protocol, taken.port) == (port.protocol, port.port)
                ips = {taken.host_ip, port.host_ip}
                if same and ("0.0.0.0" in ips or len(ips) == 1):
                    return False
    return True


def reference_feasible_nodes(snapshot: ClusterSnapshot, pod: PodSpec) -> list[int]:
    """Indexes of every node that :func:`reference_feasible` accepts."""
    return [node for node in range(snapshot.size) if reference_feasible(snapshot, pod, node)]


@pytest.fixture(scope="session")
def feasible() -> FeasibleFn:
    """The plain-Python feasibility check."""
    return reference_feasible


@pytest.fixture(scope="session")
def feasible_nodes() -> Callable[[ClusterSnapshot, PodSpec], list[int]]:
    """Every node the plain-Python feasibility check accepts."""
    return reference_feasible_nodes


@pytest.fixture(scope="session")
def extras_fit() -> FeasibleFn:
    """The plain-Python extra-resource and host-port check."""
    return reference_extras_fit
