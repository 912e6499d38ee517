"""Why a bind would break the snapshot's invariants: the one check every bind passes.

:meth:`gpupool.core.snapshot.ClusterSnapshot.bind` refuses what this finds, whoever asks (the
scheduler's decisions, a running pod read back from the cluster, a what-if restored): no CPU,
memory, pod slot, extra resource, host port, GPU share, per-GPU pod slot or MIG slice is ever
given twice. It reads the snapshot and changes nothing, so it sits apart from the state it
guards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupool.core.model import PodSpec, RequestKind

if TYPE_CHECKING:
    from gpupool.core.snapshot import ClusterSnapshot


def bind_problem(
    snapshot: ClusterSnapshot, pod: PodSpec, node: int, gpus: tuple[int, ...]
) -> str | None:
    """Why binding ``pod`` to ``gpus`` of ``node`` would break an invariant (None: it would not)."""
    where = f"pod {pod.name!r} on node {snapshot.node_names[node]!r}"
    if snapshot.cpu_free[node] < pod.cpu_milli:
        return f"{where}: insufficient cpu"
    if snapshot.memory_free[node] < pod.memory_mib:
        return f"{where}: insufficient memory"
    if snapshot.pods_free[node] < 1:
        return f"{where}: too many pods"
    if pod.kind is RequestKind.MIG and not _mig_slice_free(snapshot, pod.mig_profile, node):
        return f"{where}: no free MIG slice {pod.mig_profile}"
    if pod.extra_resources:
        short = snapshot.extras.short_of(snapshot.extra_free, node, pod.extra_resources)
        if short is not None:
            return f"{where}: insufficient {short}"
    if pod.host_ports:
        taken = snapshot.ports.conflict(node, pod.host_ports)
        if taken is not None:
            return f"{where}: host port {taken.protocol}/{taken.port} on {taken.host_ip} is taken"
    if len(gpus) != pod.gpu_count or len(set(gpus)) != len(gpus):
        return f"{where}: needs {pod.gpu_count} distinct GPUs, got {gpus}"
    for gpu in gpus:
        if not 0 <= gpu < snapshot.gpu_count[node]:
            return f"{where}: no GPU {gpu}"
        if snapshot.gpu_free[node, gpu] < _compute_taken(snapshot, pod, node, gpu):
            return f"{where}: GPU {gpu} has too little compute share left"
        if snapshot.gpu_pods_free[node, gpu] < 1:
            return f"{where}: GPU {gpu} has no pod slot left"
        if snapshot.gpu_memory_free[node, gpu] < _memory_taken(snapshot, pod, node, gpu):
            return f"{where}: GPU {gpu} has too little memory left"
    return None


def _compute_taken(snapshot: ClusterSnapshot, pod: PodSpec, node: int, gpu: int) -> int:
    """Compute a pod holds on one of its GPUs: the whole capacity for a whole GPU."""
    if pod.kind is RequestKind.WHOLE:
        return int(snapshot.gpu_milli_capacity[node, gpu])
    return pod.gpu_milli


def _memory_taken(snapshot: ClusterSnapshot, pod: PodSpec, node: int, gpu: int) -> int:
    """GPU memory a pod holds on one of its GPUs: all of it for a whole (exclusive) GPU."""
    if pod.kind is RequestKind.WHOLE:
        return int(snapshot.gpu_memory_capacity[node, gpu])
    return pod.gpu_memory_mib


def _mig_slice_free(snapshot: ClusterSnapshot, profile: str, node: int) -> bool:
    return profile in snapshot.mig_profiles and bool(
        snapshot.mig_free[node, snapshot.mig_profiles.index(profile)] >= 1
    )
