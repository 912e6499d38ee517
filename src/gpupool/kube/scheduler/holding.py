"""What a bound pod holds in the scheduler's accounting: its trusted record, or a cautious guess.

The scheduler believes a pod's ``gpupool.io/allocation`` record only when it passes every check
against the pod and the node and carries the scheduler's signature
(:mod:`gpupool.kube.objects.record_check`); a forged or copied record, or none, would otherwise
let anyone who can write pods make a GPU look taken or free. :func:`record_gpus` says which GPUs
a believed record gives the pod, or why it is not believed.

A pod held without a trusted record (*foreign*) still holds something, never nothing, or the
node would be over-packed around it: :func:`foreign_holdings` lists what to try in order, its
whole request on the best-fitting GPUs, then what the node has left of it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from gpupool.core.filtering import eligible_gpus
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects import allocation
from gpupool.kube.objects.record_check import problems
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.signing import RecordSigner
from gpupool.kube.objects.translate import InvalidObjectError, pod_spec
from gpupool.kube.objects.vocabulary import ANNOTATION_ALLOCATION
from gpupool.scheduling.gpu_choice import best_fit_gpus

log = logging.getLogger(__name__)


def bound_request(snapshot: ClusterSnapshot, pod: PodRecord) -> tuple[PodSpec, int] | None:
    """The bound pod's request and its node's row; None when it is on no node we schedule.

    A request that cannot be read holds what the core can: nothing but a pod slot (its labels
    still count for other pods' affinity and spread; its own terms are lost with the request).
    """
    if pod.spec.node_name not in snapshot.node_index:
        return None  # a pod on a node we do not schedule onto (or not yet seen)
    try:
        spec = pod_spec(pod)
    except InvalidObjectError as error:
        log.warning("bound pod %s: %s", pod.key, error)
        spec = PodSpec(  # still matched by other pods' affinity terms and spread
            name=pod.metadata.uid,
            cpu_milli=0,
            memory_mib=0,
            namespace=pod.metadata.namespace,
            labels=tuple(sorted(pod.metadata.labels.items())),
        )
    return spec, snapshot.node_index[pod.spec.node_name]


def record_gpus(
    snapshot: ClusterSnapshot,
    pod: PodRecord,
    spec: PodSpec,
    row: int,
    uuids: tuple[str, ...],
    scheduler_name: str,
    signer: RecordSigner | None,
) -> tuple[int, ...] | str:
    """The GPU indexes the pod's record gives it, or why the record is not believed."""
    text = pod.metadata.annotations.get(ANNOTATION_ALLOCATION)
    if text is None:
        return "bound without the gpupool scheduler (no allocation)"
    try:
        record = allocation.decode(text)
    except allocation.AllocationFormatError as error:
        return str(error)
    node = snapshot.nodes[row]
    found = problems(record, pod, spec, node, uuids, scheduler_name, signer)
    if found:
        return "; ".join(found)
    return tuple(share.index for share in record.gpus)


def foreign_holdings(
    snapshot: ClusterSnapshot, spec: PodSpec, row: int
) -> Iterator[tuple[PodSpec, tuple[int, ...]]]:
    """What to hold for a foreign pod, best first: its request, then what ``row`` has left.

    The caller binds the first one the snapshot accepts; only the last is a partial holding.
    """
    eligible = int(eligible_gpus(snapshot, spec, row).sum()) if spec.gpu_count else 0
    if eligible >= spec.gpu_count:
        yield spec, best_fit_gpus(snapshot, spec, row)
    partial = _clamped(snapshot, spec, row, min(eligible, spec.gpu_count))
    yield partial, best_fit_gpus(snapshot, partial, row)


def _clamped(snapshot: ClusterSnapshot, spec: PodSpec, row: int, gpus: int) -> PodSpec:
    """``spec`` cut down to what ``row`` has left.

    CPU, memory, ``gpus`` GPUs, a MIG slice, the extra resources, and the host ports still free.
    """
    mig = spec.mig_profile
    if mig and not (
        mig in snapshot.mig_profiles
        and snapshot.mig_free[row, snapshot.mig_profiles.index(mig)] >= 1
    ):
        mig = ""
    return PodSpec(
        name=spec.name,
        cpu_milli=min(spec.cpu_milli, int(snapshot.cpu_free[row])),
        memory_mib=min(spec.memory_mib, int(snapshot.memory_free[row])),
        gpu_count=gpus,
        gpu_milli=spec.gpu_milli if gpus else 0,
        gpu_memory_mib=spec.gpu_memory_mib if gpus else 0,
        mig_profile=mig,
        extra_resources=snapshot.extras.clamped(snapshot.extra_free, row, spec.extra_resources),
        host_ports=tuple(
            port for port in spec.host_ports if snapshot.ports.conflict(row, (port,)) is None
        ),
    )
