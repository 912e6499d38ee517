"""Builders of Node and Pod objects shaped like what the API server returns.

The dicts follow the real objects (``apiVersion``, ``kind``, extra fields the records skip), and
the records are decoded from their JSON with ``msgspec`` exactly as the informers do.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gpupool.core.decisions import Bind
from gpupool.core.filtering import node_checks
from gpupool.core.model import PodSpec
from gpupool.kube.objects import allocation
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.signing import RecordSigner
from gpupool.kube.scheduler.state import ClusterState

Json = dict[str, Any]

HEARTBEAT = "2025-01-01T00:00:00Z"
SIGNER = RecordSigner.generate()
"""The scheduler's key in unit tests: records signed with it are the scheduler's own."""


def node_dict(
    name: str,
    *,
    gpus: int = 4,
    model: str = "H100",
    gpu_memory_mib: int | str = 81559,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: str = "110",
    mig: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    taints: list[Json] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
    heartbeat: str = HEARTBEAT,
    resource_version: str = "1",
) -> Json:
    """A Node as kwok and the fake-node agent publish it."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "100Gi"}
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    annotations = {"kwok.x-k8s.io/node": "fake"}
    if gpus:
        allocatable["gpupool.io/gpu"] = str(gpus)
        all_labels["gpupool.io/gpu-model"] = model
        all_labels["gpupool.io/gpu-memory-mib"] = str(gpu_memory_mib)
        annotations["gpupool.io/gpu-uuids"] = ",".join(f"GPU-{name}-{i}" for i in range(gpus))
    allocatable.update(mig or {})
    spec: Json = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-node-{name}",
            "resourceVersion": resource_version,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": all_labels,
            "annotations": annotations,
        },
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "lastHeartbeatTime": heartbeat,
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                },
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastHeartbeatTime": heartbeat,
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                    "reason": "KubeletReady",
                },
            ],
        },
    }


def pod_dict(
    name: str,
    *,
    uid: str | None = None,
    namespace: str = "default",
    gpus: int | str = 0,
    gpu_memory: int | str = 0,
    cores: int | str = 0,
    mig: str = "",
    cpu: str = "1",
    memory: str = "1Gi",
    node: str = "",
    scheduler: str = "gpupool",
    phase: str = "Pending",
    priority: int = 0,
    created: str = "2025-01-01T00:00:00Z",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    selector: dict[str, str] | None = None,
    tolerations: list[Json] | None = None,
    gates: list[str] | None = None,
    deleted: bool = False,
    resource_version: str = "1",
) -> Json:
    """A Pod shaped like the integration tests' ``gpu_pod``: GPU resources in ``limits``."""
    limits: dict[str, str] = {}
    if gpus:
        limits["gpupool.io/gpu"] = str(gpus)
    if gpu_memory:
        limits["gpupool.io/gpu-memory"] = str(gpu_memory)
    if cores:
        limits["gpupool.io/gpu-cores"] = str(cores)
    if mig:
        limits[f"gpupool.io/mig-{mig}"] = "1"
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    metadata: Json = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{name}",
        "resourceVersion": resource_version,
        "creationTimestamp": created,
        "labels": labels or {},
        "annotations": annotations or {},
    }
    if deleted:
        metadata["deletionTimestamp"] = "2025-01-01T01:00:00Z"
    spec: Json = {
        "schedulerName": scheduler,
        "priority": priority,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/cuda:latest",
                "resources": {"limits": limits, "requests": requests},
            }
        ],
        "restartPolicy": "Never",
    }
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    if tolerations:
        spec["tolerations"] = tolerations
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase, "qosClass": "Burstable"},
    }


def decode_pod(obj: Json) -> PodRecord:
    """The record an informer would hold for ``obj``."""
    return msgspec.json.decode(msgspec.json.encode(obj), type=PodRecord)


def decode_node(obj: Json) -> NodeRecord:
    """The record an informer would hold for ``obj``."""
    return msgspec.json.decode(msgspec.json.encode(obj), type=NodeRecord)


def pod(name: str, **fields: Any) -> PodRecord:
    """A pod record (see :func:`pod_dict` for the fields)."""
    return decode_pod(pod_dict(name, **fields))


def node(name: str, **fields: Any) -> NodeRecord:
    """A node record (see :func:`node_dict` for the fields)."""
    return decode_node(node_dict(name, **fields))


def bind_decision(spec: PodSpec, node_row: int, node_name: str, gpus: tuple[int, ...]) -> Bind:
    """A bind decision as the scheduler would make it."""
    return Bind(
        pod=spec, node=node_row, node_name=node_name, gpus=gpus, score=None, feasible_nodes=1
    )


def allocation_annotation(decision: Bind, uid: str | None = None) -> dict[str, str]:
    """The signed ``gpupool.io/allocation`` annotation the Binding stamps for ``decision``.

    ``uid`` is the pod's uid (default: the core's pod name, which the scheduler sets to it).
    """
    record = allocation.from_decision(
        decision,
        uuids=tuple(f"GPU-{decision.node_name}-{i}" for i in range(8)),
        scheduler="gpupool-0",
        time="2025-01-01T00:00:01Z",
    )
    record = SIGNER.sign(record, uid or decision.pod.name)
    return {"gpupool.io/allocation": allocation.encode(record)}


def annotated(
    node_name: str,
    gpus: tuple[int, ...],
    kind: str = "whole",
    *,
    uid: str,
    milli: int = 1000,
    memory_mib: int = 0,
    signer: RecordSigner | None = SIGNER,
) -> dict[str, str]:
    """An allocation annotation for a pod bound before this scheduler started.

    Signed with the test key unless ``signer`` is None (a hand-written, untrusted record).
    """
    record = allocation.AllocationRecord(
        node=node_name,
        kind=kind,
        gpus=tuple(
            allocation.GpuShare(
                index=i, uuid=f"GPU-{node_name}-{i}", milli=milli, memory_mib=memory_mib
            )
            for i in gpus
        ),
        scheduler="gpupool-0",
    )
    if signer is not None:
        record = signer.sign(record, uid)
    return {"gpupool.io/allocation": allocation.encode(record)}


def make_state(*nodes: NodeRecord, pods: tuple[PodRecord, ...] = ()) -> ClusterState:
    """A leading replica's state (signing with the test key) after these events."""
    state = ClusterState("gpupool", signer=SIGNER)
    state.restart()
    for node_record in nodes:
        state.on_node("ADDED", node_record)
    for pod_record in pods:
        state.on_pod("ADDED", pod_record)
    state.sync()
    return state


def masks(state: ClusterState, record: PodRecord) -> dict[str, list[bool]]:
    """The core's node checks for the pod's translated request on the state's snapshot."""
    assert state.snapshot is not None
    checks = node_checks(state.snapshot, state.spec_of(record).constraints)
    return {name: [bool(v) for v in mask] for name, mask in checks}
