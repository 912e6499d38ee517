"""An independent check of what the scheduler gave out, read from the cluster's raw JSON.

The allocation records on the pods are the record of truth, so whether the scheduler ever gave
one GPU share twice is answered by reading them back from the API server, not by asking the
scheduler's cache. The integration tests and the live benchmark ask the same question; with one
checker they cannot drift apart (the review found two copies that checked different things: the
bench ignored memory, the tests ignored the GPU inventory).

It works on raw pod and node JSON on purpose: it shares no decoding with the scheduler
(:mod:`gpupool.kube.objects.records`, :mod:`gpupool.kube.scheduler.state`), so a bug there cannot
hide itself here.
Rules, for every pod with ``spec.schedulerName`` = ours that is bound and not finished:

* it carries a readable ``gpupool.io/allocation`` record, whose ``node`` is ``spec.nodeName``;
* a whole or shared record has as many GPUs as the pod asks for in ``gpupool.io/gpu``;
* each GPU index exists on the node, and a UUID in the record matches the node's inventory;
* no (node, GPU) is given more than 1000 milli or more than the GPU's memory in all;
* a GPU given whole is given to that pod alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.kube.client.api import JsonObject
from gpupool.kube.objects.allocation import AllocationFormatError, decode
from gpupool.kube.objects.quantity import QuantityError, to_count
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_ALLOCATION,
    ANNOTATION_GPU_UUIDS,
    LABEL_GPU_MEMORY,
    RESOURCE_GPU,
    SCHEDULER_NAME,
)

MILLI_PER_GPU = 1000
PROBLEMS = (
    "missing_record",
    "unreadable_record",
    "node_mismatch",
    "unknown_node",
    "wrong_gpu_count",
    "unknown_gpu",
    "uuid_mismatch",
    "compute_over_1000_milli",
    "memory_over_gpu",
    "whole_gpu_shared",
)
"""Every kind of problem the checker reports, in the order the message lists them."""


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """What one node has, as its Node object says (the fake nodes and the agent write this).

    Attributes:
        count: ``gpupool.io/gpu`` in ``status.allocatable``.
        memory_mib: The ``gpupool.io/gpu-memory-mib`` label (memory of each GPU).
        uuids: The ``gpupool.io/gpu-uuids`` annotation, by index (may be empty).
    """

    count: int
    memory_mib: int
    uuids: tuple[str, ...] = ()

    @classmethod
    def from_node(cls, node: JsonObject) -> NodeGpus:
        """Read a raw Node; a missing or malformed field reads as 0 GPUs / 0 MiB / no UUIDs."""
        metadata = node.get("metadata") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        uuids = (metadata.get("annotations") or {}).get(ANNOTATION_GPU_UUIDS) or ""
        return cls(
            count=_int_or_zero(allocatable.get(RESOURCE_GPU)),
            memory_mib=_int_or_zero((metadata.get("labels") or {}).get(LABEL_GPU_MEMORY)),
            uuids=tuple(uuids.split(",")) if uuids else (),
        )


def _int_or_zero(text: object) -> int:
    try:
        return to_count(str(text)) if text is not None else 0
    except (QuantityError, ValueError):
        return 0


def inventory(nodes: Iterable[JsonObject]) -> dict[str, NodeGpus]:
    """Node name -> its GPUs, from raw Node objects (a node list's ``items``)."""
    return {node["metadata"]["name"]: NodeGpus.from_node(node) for node in nodes}


@dataclass
class AllocationCheck:
    """The outcome: counts, and every problem found, by kind (messages name pod, node, GPU)."""

    pods_checked: int = 0
    pods_bound: int = 0
    records_checked: int = 0
    gpus_used: int = 0
    problems: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in PROBLEMS})

    @property
    def ok(self) -> bool:
        """No problem of any kind."""
        return not any(self.problems.values())

    def summary(self, examples: int = 5) -> dict[str, Any]:
        """For a JSON report: the counts, each problem's count and up to ``examples`` of each."""
        out: dict[str, Any] = {
            "pods_checked": self.pods_checked,
            "pods_bound": self.pods_bound,
            "records_checked": self.records_checked,
            "gpus_used": self.gpus_used,
        }
        for kind, found in self.problems.items():
            out[kind] = len(found)
            if found:
                out[f"{kind}_examples"] = found[:examples]
        out["ok"] = self.ok
        return out

    def message(self, examples: int = 5) -> str:
        """One line per kind of problem with its first examples; empty when all is well."""
        return "\n".join(
            f"{kind} ({len(found)}): " + "; ".join(found[:examples])
            for kind, found in self.problems.items()
            if found
        )


class AllocationProblemError(RuntimeError):
    """The allocation records break a rule; the message lists each kind of problem."""


def check_allocations(
    pods: Iterable[JsonObject],
    nodes: Mapping[str, NodeGpus],
    scheduler_name: str = SCHEDULER_NAME,
) -> AllocationCheck:
    """Check every record of the bound, unfinished pods of ``scheduler_name`` against ``nodes``."""
    check = AllocationCheck()
    milli: dict[tuple[str, int], int] = defaultdict(int)
    memory: dict[tuple[str, int], int] = defaultdict(int)
    holders: dict[tuple[str, int], list[str]] = defaultdict(list)
    whole: dict[tuple[str, int], list[str]] = defaultdict(list)
    for pod in pods:
        check.pods_checked += 1
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or spec.get("schedulerName") != scheduler_name:
            continue
        if phase in ("Succeeded", "Failed"):
            continue
        check.pods_bound += 1
        name = f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"
        text = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_ALLOCATION)
        if text is None:
            check.problems["missing_record"].append(name)
            continue
        try:
            record = decode(text)
        except AllocationFormatError as error:
            check.problems["unreadable_record"].append(f"{name}: {error}")
            continue
        check.records_checked += 1
        if record.node != node:
            check.problems["node_mismatch"].append(f"{name}: record {record.node}, bound {node}")
        gpus = nodes.get(node)
        if gpus is None:
            check.problems["unknown_node"].append(f"{name}: {node}")
            continue
        if record.kind in ("whole", "share"):
            asked = _asked_gpus(spec)
            if asked != len(record.gpus):
                check.problems["wrong_gpu_count"].append(
                    f"{name}: asks {asked}, record has {len(record.gpus)}"
                )
        for share in record.gpus:
            key = (node, share.index)
            where = f"{node}/{share.index}"
            if not 0 <= share.index < gpus.count:
                check.problems["unknown_gpu"].append(f"{name}: {where}")
                continue
            if share.uuid and gpus.uuids and share.uuid != gpus.uuids[share.index]:
                check.problems["uuid_mismatch"].append(
                    f"{name}: {share.uuid} != {gpus.uuids[share.index]}"
                )
            holders[key].append(name)
            milli[key] += share.milli
            if record.kind == "whole":
                whole[key].append(name)
                memory[key] += gpus.memory_mib
            else:
                memory[key] += share.memory_mib
    for key, total in milli.items():
        where = f"{key[0]}/{key[1]}"
        if total > MILLI_PER_GPU:
            check.problems["compute_over_1000_milli"].append(
                f"{where}: {total} milli to {holders[key]}"
            )
        if memory[key] > nodes[key[0]].memory_mib:
            check.problems["memory_over_gpu"].append(
                f"{where}: {memory[key]} of {nodes[key[0]].memory_mib} MiB to {holders[key]}"
            )
        if whole[key] and len(holders[key]) > 1:
            check.problems["whole_gpu_shared"].append(
                f"{where}: whole to {whole[key]}, held by {holders[key]}"
            )
    check.gpus_used = len(milli)
    return check


def _asked_gpus(spec: JsonObject) -> int:
    """``gpupool.io/gpu`` summed over the containers (limits, else requests); -1 if unreadable."""
    total = 0
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        text = (resources.get("limits") or {}).get(RESOURCE_GPU) or (
            resources.get("requests") or {}
        ).get(RESOURCE_GPU)
        if text is not None:
            try:
                total += to_count(str(text))
            except (QuantityError, ValueError):
                return -1
    return total


def raise_for_problems(check: AllocationCheck) -> None:
    """Raise :class:`AllocationProblemError` listing every problem, if there is any.

    Raises:
        AllocationProblemError: At least one rule is broken.
    """
    if not check.ok:
        raise AllocationProblemError(
            f"allocation records break the rules ({check.records_checked} checked):\n"
            + check.message()
        )
