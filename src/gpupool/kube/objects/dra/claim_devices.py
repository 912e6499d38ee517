"""Which of the ResourceSlices' devices a claim's request may use, and the allocation it gets.

Eligibility is the AND of the request's DeviceClass selectors and its own (CEL,
:mod:`gpupool.kube.objects.dra.cel`), on devices of gpupool's driver of the request's type (a
GPU for whole and share requests, a MIG instance of the class's profile for MIG requests) whose
taints the request tolerates. The result is per node, by device name; the scheduler maps GPU
devices onto its snapshot's GPU columns by UUID (:func:`gpu_columns`), so the placement policy
chooses among exactly the eligible GPUs.

The allocation written into the claim (:func:`allocation_result`) says what the core decided in
DRA's terms: one result per device, pool = node, and the capacity consumed: a share's memory and
compute, a whole GPU's full capacity (it is exclusive), nothing for a MIG instance (exclusive by
being a device of its own). Shared devices get a ``shareID``, derived from the claim's uid and the
device, so writing the same allocation twice gives the same ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import msgspec

from gpupool.core.model import PodSpec
from gpupool.kube.objects.dra.cel import (
    COMPILER,
    CompiledSelector,
    SelectorCompileError,
    SelectorCompiler,
)
from gpupool.kube.objects.dra.claims import (
    MAX_COUNT,
    ClaimLookup,
    ClassLookup,
    GpupoolRequest,
    TemplateLookup,
    claim_pod_spec,
    claim_sources,
    gpupool_request,
)
from gpupool.kube.objects.dra.device_cache import DeviceCache, DeviceScan, EligibleDevices
from gpupool.kube.objects.dra.records import (
    ATTRIBUTE_TYPE,
    CAPACITY_COMPUTE,
    CAPACITY_MEMORY,
    DRIVER,
    TYPE_GPU,
    TYPE_MIG,
    AllocationResult,
    Device,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
    DeviceToleration,
    ResourceSlice,
)
from gpupool.kube.objects.quantity import MIB, binary_quantity, milli_quantity, parse_quantity
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import InvalidObjectError

MAX_REPORTED_ERRORS = 3
_SHARE_NAMESPACE = uuid.UUID("6c1f1a4e-4a43-4c52-9f55-6770757f6f6c")


def _selectors(
    owner: str, request: GpupoolRequest, compiler: SelectorCompiler
) -> list[CompiledSelector]:
    """The class's selectors, then the request's; a compile error names its field."""
    device_class = request.device_class
    sources = [
        (f"DeviceClass {device_class.metadata.name} spec.selectors[{i}]", s)
        for i, s in enumerate(device_class.spec.selectors)
    ]
    sources += [
        (f"{request.field}.exactly.selectors[{i}]", s)
        for i, s in enumerate(request.exactly.selectors)
    ]
    compiled = []
    for path, selector in sources:
        if selector.cel is None:
            raise InvalidObjectError(owner, f"{path}.cel", "a selector needs a CEL expression")
        try:
            compiled.append(compiler.compile(selector.cel.expression))
        except SelectorCompileError as error:
            raise InvalidObjectError(owner, f"{path}.cel.expression", str(error)) from None
    return compiled


def _tolerates(tolerations: Sequence[DeviceToleration], device: Device) -> bool:
    for taint in device.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(
            (t.key in ("", taint.key))
            and (t.operator == "Exists" or t.value == taint.value)
            and t.effect in ("", taint.effect)
            for t in tolerations
        ):
            return False
    return True


def _of_kind(request: GpupoolRequest, device: Device) -> bool:
    attributes = device.attributes
    kind = attributes.get(ATTRIBUTE_TYPE)
    if request.kind == "mig":
        profile = attributes.get("profile")
        return (
            kind is not None
            and kind.string == TYPE_MIG
            and profile is not None
            and profile.string == request.mig_profile
        )
    return kind is not None and kind.string == TYPE_GPU


def _memory_mib(device: Device) -> int:
    capacity = device.capacity.get(CAPACITY_MEMORY)
    return int(parse_quantity(capacity.value) / MIB) if capacity else 0


def eligible_devices(
    owner: str,
    request: GpupoolRequest,
    slices: Sequence[ResourceSlice],
    cache: DeviceCache,
    compiler: SelectorCompiler = COMPILER,
) -> EligibleDevices:
    """The devices of gpupool's slices that ``request`` may use.

    Raises:
        InvalidObjectError: A selector does not compile, or a share asks for more memory
            than any GPU device has.
    """
    selectors = _selectors(owner, request, compiler)
    tolerations = request.exactly.tolerations
    key = (
        request.kind,
        request.mig_profile,
        tuple(selector.expression for selector in selectors),
        msgspec.json.encode(tolerations),
    )
    result = cache.of_slices(key, slices, partial(_scan, request, selectors, slices, cache))
    if request.kind == "share" and result.largest and request.memory_mib > result.largest:
        raise InvalidObjectError(
            owner,
            f"{request.field}.exactly.capacity.requests[{CAPACITY_MEMORY}]",
            f"{request.memory_mib}Mi is more memory than any device has "
            f"(largest: {result.largest}Mi)",
        )
    return result.eligible


def _scan(
    request: GpupoolRequest,
    selectors: Sequence[CompiledSelector],
    slices: Sequence[ResourceSlice],
    cache: DeviceCache,
) -> DeviceScan:
    """Every device of gpupool's slices judged for one kind of request."""
    tolerations = request.exactly.tolerations
    result = EligibleDevices()
    errors: list[str] = []
    largest = 0
    for resource_slice in slices:
        node = resource_slice.spec.node_name
        if resource_slice.spec.driver != DRIVER or not node:
            continue
        eligible = []
        for device in resource_slice.spec.devices:
            if not _of_kind(request, device):
                continue
            largest = max(largest, _memory_mib(device))
            if not _tolerates(tolerations, device):
                continue
            try:
                verdicts = [cache.verdict(s, resource_slice, device) for s in selectors]
            except ValueError as error:
                errors.append(f"device {node}/{device.name}: {error}")
                continue
            failed = next((v for v in verdicts if not v.matches), None)
            if failed is None:
                eligible.append(device.name)
            elif failed.error:
                errors.append(f"device {node}/{device.name}: {failed.error}")
        result.by_node[node] = tuple(eligible)
        result.uuids[node] = {
            d.name: str(d.attributes["uuid"].value())
            for d in resource_slice.spec.devices
            if "uuid" in d.attributes
        }
    scanned = EligibleDevices(result.by_node, result.uuids, tuple(errors[:MAX_REPORTED_ERRORS]))
    return DeviceScan(scanned, largest)


def gpu_columns(eligible: EligibleDevices, node: str, node_uuids: Sequence[str]) -> frozenset[int]:
    """The snapshot's GPU columns (positions in the node's UUID list) that are eligible."""
    names = eligible.by_node.get(node, ())
    by_uuid = {eligible.uuids.get(node, {}).get(name): name for name in names}
    return frozenset(i for i, gpu in enumerate(node_uuids) if gpu in by_uuid)


def device_of_column(eligible: EligibleDevices, node: str, gpu_uuid: str) -> str:
    """The device name of the GPU with ``gpu_uuid`` on ``node``.

    Raises:
        KeyError: No device of the node's slice has that UUID.
    """
    for name, known in eligible.uuids.get(node, {}).items():
        if known == gpu_uuid:
            return name
    raise KeyError(f"node {node}: no device with UUID {gpu_uuid}")


def share_id(claim_uid: str, device: str) -> str:
    """The ``shareID`` of a claim's allocation on a shared device (stable across rewrites)."""
    return str(uuid.uuid5(_SHARE_NAMESPACE, f"{claim_uid}/{device}"))


def allocation_result(
    request: GpupoolRequest,
    node: str,
    devices: Sequence[str],
    capacity: dict[str, Device],
) -> AllocationResult:
    """``status.allocation`` for ``request`` given ``devices`` on ``node``.

    ``capacity`` maps device names to their slice devices (for a whole GPU's full capacity).
    """
    results = []
    for name in devices:
        consumed: dict[str, str] = {}
        shared = bool(capacity[name].allow_multiple_allocations)
        if request.kind == "whole":
            consumed = {key: value.value for key, value in capacity[name].capacity.items()}
        elif request.kind == "share":
            consumed = {
                CAPACITY_MEMORY: binary_quantity(request.memory_mib * MIB),
                CAPACITY_COMPUTE: milli_quantity(request.milli),
            }
        results.append(
            DeviceRequestAllocationResult(
                request=request.name,
                driver=DRIVER,
                pool=node,
                device=name,
                share_id=share_id(request.source.uid, name) if shared else None,
                consumed_capacity=consumed if shared else {},
            )
        )
    return AllocationResult(devices=DeviceAllocationResult(results=tuple(results)))


def max_gpus_per_node(slices: Iterable[ResourceSlice]) -> int:
    """The most GPU devices of gpupool's driver on one node (the limit of a request's count)."""
    counts = [
        sum(
            1
            for d in s.spec.devices
            if d.attributes.get(ATTRIBUTE_TYPE) and d.attributes[ATTRIBUTE_TYPE].string == TYPE_GPU
        )
        for s in slices
        if s.spec.driver == DRIVER
    ]
    return max(counts, default=0)


@dataclass(frozen=True, slots=True)
class ClaimTranslation:
    """A claim pod as the core places it.

    Attributes:
        request: Its one gpupool request.
        spec: The core's request (CPU, memory from the pod; GPUs from the claim).
        eligible: The devices it may use.
    """

    request: GpupoolRequest
    spec: PodSpec
    eligible: EligibleDevices


def translate_pod_claims(
    pod: PodRecord,
    claims: ClaimLookup,
    templates: TemplateLookup,
    classes: ClassLookup,
    slices: Sequence[ResourceSlice],
    cache: DeviceCache,
) -> ClaimTranslation | None:
    """The pod's claims as the core's request and eligible devices; None without claims.

    Raises:
        InvalidObjectError: The pod cannot be placed as asked; the message names the field.
    """
    if not pod.spec.resource_claims:
        return None
    sources = claim_sources(pod, claims, templates)
    most = cache.of_slices(("max_gpus",), slices, partial(max_gpus_per_node, slices))
    request = gpupool_request(pod, sources, classes, most or MAX_COUNT)
    if request is None:
        return None
    spec = claim_pod_spec(pod, request)
    eligible = eligible_devices(f"pod {pod.key}", request, slices, cache)
    return ClaimTranslation(request, spec, eligible)
