"""From a pod's ResourceClaims to what the core places: one GPU request, and the devices it may use.

A pod asks for gpupool's devices through claims: ``spec.resourceClaims`` names a ResourceClaim,
or a ResourceClaimTemplate from which kube-controller-manager makes one claim per pod (named in
``status.resourceClaimStatuses``). Each request of a claim names a DeviceClass; gpupool's classes
(:mod:`gpupool.kube.install.device_classes`) say by their ``gpupool.io/request-kind`` label how
the request maps onto the core's request (:class:`gpupool.core.model.PodSpec`):

* ``whole`` (``gpu.gpupool.io``), ``count: N``: N whole GPUs;
* ``share`` (``gpu-share.gpupool.io``) with ``capacity.requests`` ``memory`` (rounded up to MiB)
  and/or ``compute`` (``300m`` = 300 milli-GPU): that share of each of ``count`` GPUs;
* ``mig`` (``mig-<profile>.gpupool.io``): one MIG slice of the class's profile.

Which devices a request may use is its class's and its own CEL selectors, evaluated on the
ResourceSlices (:mod:`gpupool.kube.objects.dra.claim_devices`). Everything else is refused with the
field named, so the pod pends with a reason instead of being half-handled: an unknown class, a
class of another driver, a selector that does not compile, more capacity than any device has, a
count above what a node has, features gpupool does not place (``firstAvailable``,
``allocationMode: All``, ``adminAccess``, ``constraints``), several gpupool requests in one
pod, and a pod that also asks for gpupool's extended resources.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction

from gpupool.core.model import MILLI_PER_GPU, InvalidSpecError, PodSpec
from gpupool.kube.objects.dra.records import (
    CAPACITY_COMPUTE,
    CAPACITY_MEMORY,
    DRIVER,
    LABEL_MIG_PROFILE,
    LABEL_REQUEST_KIND,
    DeviceClass,
    DeviceRequest,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimTemplate,
)
from gpupool.kube.objects.quantity import MIB, QuantityError, parse_quantity
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import InvalidObjectError, pod_spec

MAX_COUNT = 32
"""``AllocationResultsMaxSize`` of resource.k8s.io/v1: no claim has more devices."""
KINDS = ("whole", "share", "mig")


@dataclass(frozen=True, slots=True)
class ClaimSource:
    """Where one of the pod's claims comes from.

    Attributes:
        pod_claim: The name in ``spec.resourceClaims``.
        namespace: The pod's namespace.
        claim: The ResourceClaim's name ("" while a template's claim is not made yet).
        field: The path of the claim's spec for messages (``ResourceClaim ns/name spec``).
        spec: The claim's spec (the template's while its claim is not made yet).
        uid: The claim's uid ("" while not made).
    """

    pod_claim: str
    namespace: str
    claim: str
    field: str
    spec: ResourceClaimSpec
    uid: str = ""


@dataclass(frozen=True, slots=True)
class GpupoolRequest:
    """The one request of gpupool's driver a pod makes.

    Attributes:
        source: Its claim.
        index: Its position in ``spec.devices.requests``.
        name: Its name.
        device_class: Its DeviceClass.
        kind: ``whole``, ``share`` or ``mig``.
        count: Devices.
        memory_mib: A share's memory per GPU (0: none asked).
        milli: A share's compute per GPU in milli-GPU (0: none asked).
        mig_profile: A MIG request's profile.
    """

    source: ClaimSource
    index: int
    name: str
    device_class: DeviceClass
    kind: str
    count: int = 1
    memory_mib: int = 0
    milli: int = 0
    mig_profile: str = ""

    @property
    def field(self) -> str:
        """The request's path for messages."""
        return f"{self.source.field}.devices.requests[{self.index}]"

    @property
    def exactly(self) -> ExactDeviceRequest:
        """The request's ``exactly`` (always set once translated)."""
        request = self.source.spec.devices.requests[self.index].exactly
        assert request is not None  # translation refuses requests without it
        return request


ClaimLookup = Callable[[str, str], ResourceClaim | None]
TemplateLookup = Callable[[str, str], ResourceClaimTemplate | None]
ClassLookup = Callable[[str], DeviceClass | None]


def claim_sources(
    pod: PodRecord, claims: ClaimLookup, templates: TemplateLookup
) -> tuple[ClaimSource, ...]:
    """Every claim of the pod, resolved.

    Raises:
        InvalidObjectError: A claim or template that does not exist (yet), or an entry that
            names neither.
    """
    owner = f"pod {pod.key}"
    namespace = pod.metadata.namespace
    generated = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses}
    sources = []
    for i, entry in enumerate(pod.spec.resource_claims):
        field = f"spec.resourceClaims[{i}]"
        name = entry.resource_claim_name or generated.get(entry.name)
        if name:
            claim = claims(namespace, name)
            if claim is None:
                raise InvalidObjectError(
                    owner, field, f"ResourceClaim {namespace}/{name} not found"
                )
            sources.append(
                ClaimSource(
                    entry.name,
                    namespace,
                    name,
                    f"ResourceClaim {namespace}/{name} spec",
                    claim.spec,
                    claim.metadata.uid,
                )
            )
        elif entry.resource_claim_template_name:
            template_name = entry.resource_claim_template_name
            template = templates(namespace, template_name)
            if template is None:
                raise InvalidObjectError(
                    owner,
                    f"{field}.resourceClaimTemplateName",
                    f"ResourceClaimTemplate {namespace}/{template_name} not found",
                )
            sources.append(
                ClaimSource(
                    entry.name,
                    namespace,
                    "",
                    f"ResourceClaimTemplate {namespace}/{template_name} spec.spec",
                    template.spec.spec,
                )
            )
        else:
            raise InvalidObjectError(
                owner, field, "names neither resourceClaimName nor resourceClaimTemplateName"
            )
    return tuple(sources)


def _kind(owner: str, field: str, name: str, device_class: DeviceClass | None) -> str:
    if device_class is None:
        raise InvalidObjectError(owner, field, f"DeviceClass {name!r} not found")
    kind = device_class.metadata.labels.get(LABEL_REQUEST_KIND, "")
    if kind not in KINDS:
        raise InvalidObjectError(
            owner,
            field,
            f"DeviceClass {name!r} is not one of gpupool's ({DRIVER}: no "
            f"{LABEL_REQUEST_KIND} label): gpupool places only its own driver's claims",
        )
    return kind


def _share_capacity(owner: str, field: str, request: ExactDeviceRequest) -> tuple[int, int]:
    """A share's (memory MiB, milli) per GPU from ``capacity.requests``."""
    asked = request.capacity.requests if request.capacity else {}
    memory, compute = Fraction(0), Fraction(0)
    for name, amount in asked.items():
        key = name.removeprefix(f"{DRIVER}/")
        path = f"{field}.exactly.capacity.requests[{name}]"
        try:
            value = parse_quantity(amount)
        except QuantityError as error:
            raise InvalidObjectError(owner, path, str(error)) from None
        if value <= 0:
            raise InvalidObjectError(owner, path, f"must be > 0, got {amount}")
        if key == CAPACITY_MEMORY:
            memory = value
        elif key == CAPACITY_COMPUTE:
            if value > 1:
                raise InvalidObjectError(
                    owner, path, f"{amount} is more compute than any device has (1 = a whole GPU)"
                )
            compute = value
        else:
            raise InvalidObjectError(
                owner,
                path,
                f"unknown capacity; gpupool's GPUs have {CAPACITY_MEMORY}, {CAPACITY_COMPUTE}",
            )
    if not memory and not compute:
        raise InvalidObjectError(
            owner,
            f"{field}.exactly.capacity.requests",
            f"a share asks for {CAPACITY_MEMORY} and/or {CAPACITY_COMPUTE}",
        )
    return math.ceil(memory / MIB), math.ceil(compute * MILLI_PER_GPU)


def _unsupported(owner: str, field: str, request: DeviceRequest) -> ExactDeviceRequest:
    if request.exactly is None:
        what = "firstAvailable (a prioritized list)" if request.first_available else "nothing"
        raise InvalidObjectError(
            owner, f"{field}.exactly", f"gpupool places exact requests only; this asks {what}"
        )
    exactly = request.exactly
    if exactly.allocation_mode != "ExactCount":
        raise InvalidObjectError(
            owner,
            f"{field}.exactly.allocationMode",
            f"{exactly.allocation_mode} is not supported by gpupool (ExactCount only)",
        )
    if exactly.admin_access:
        raise InvalidObjectError(
            owner, f"{field}.exactly.adminAccess", "admin access is not supported by gpupool"
        )
    return exactly


def _request(
    owner: str, source: ClaimSource, index: int, classes: ClassLookup, max_count: int
) -> GpupoolRequest:
    """The request as gpupool's (a class of another driver is refused)."""
    request = source.spec.devices.requests[index]
    field = f"{source.field}.devices.requests[{index}]"
    exactly = _unsupported(owner, field, request)
    class_name = exactly.device_class_name
    kind = _kind(owner, f"{field}.exactly.deviceClassName", class_name, classes(class_name))
    device_class = classes(class_name)
    assert device_class is not None
    if not 1 <= exactly.count <= max_count:
        raise InvalidObjectError(
            owner,
            f"{field}.exactly.count",
            f"must be 1..{max_count} (the most gpupool GPUs on one node), got {exactly.count}",
        )
    result = GpupoolRequest(source, index, request.name, device_class, kind, exactly.count)
    if kind == "share":
        memory, milli = _share_capacity(owner, field, exactly)
        if milli == MILLI_PER_GPU and not memory:
            # all of a GPU's compute and no memory cap is a whole GPU, as in the core's model:
            # it is written as consuming the whole device, so no other claim is put beside it
            return replace(result, kind="whole")
        return replace(result, memory_mib=memory, milli=milli)
    if exactly.capacity and exactly.capacity.requests:
        raise InvalidObjectError(
            owner,
            f"{field}.exactly.capacity",
            f"capacity requests are for shares ({class_name} gives whole devices)",
        )
    if kind == "mig":
        if exactly.count != 1:
            raise InvalidObjectError(
                owner, f"{field}.exactly.count", f"must be 1 (one MIG slice), got {exactly.count}"
            )
        profile = device_class.metadata.labels.get(LABEL_MIG_PROFILE, "")
        return replace(result, mig_profile=profile)
    return result


def gpupool_request(
    pod: PodRecord, sources: tuple[ClaimSource, ...], classes: ClassLookup, max_count: int
) -> GpupoolRequest | None:
    """The pod's one gpupool request (None when it has no claims at all).

    Raises:
        InvalidObjectError: Anything the module docstring lists as refused.
    """
    owner = f"pod {pod.key}"
    found: list[GpupoolRequest] = []
    for source in sources:
        if source.spec.devices.constraints:
            raise InvalidObjectError(
                owner, f"{source.field}.devices.constraints", "constraints are not supported"
            )
        for index in range(len(source.spec.devices.requests)):
            found.append(_request(owner, source, index, classes, min(max_count, MAX_COUNT)))
    if len(found) > 1:
        names = ", ".join(f"{r.field} ({r.name})" for r in found)
        raise InvalidObjectError(
            owner, "spec.resourceClaims", f"gpupool places one device request per pod: {names}"
        )
    return found[0] if found else None


def claim_pod_spec(pod: PodRecord, request: GpupoolRequest) -> PodSpec:
    """The core's request of a pod whose GPUs come from ``request``.

    Raises:
        InvalidObjectError: The pod also asks for gpupool's extended resources.
    """
    base = pod_spec(pod)
    if base.gpu_count or base.mig_profile:
        raise InvalidObjectError(
            f"pod {pod.key}",
            "spec.containers[].resources",
            f"asks for gpupool's extended resources and for {request.field} "
            f"({request.device_class.metadata.name}): use one or the other",
        )
    try:
        if request.kind == "mig":
            return replace(base, mig_profile=request.mig_profile)
        if request.kind == "whole":
            return replace(base, gpu_count=request.count, gpu_milli=MILLI_PER_GPU)
        return replace(
            base,
            gpu_count=request.count,
            gpu_milli=request.milli,
            gpu_memory_mib=request.memory_mib,
        )
    except InvalidSpecError as error:
        raise InvalidObjectError(f"pod {pod.key}", request.field, str(error)) from None


def claim_lookups(
    claims: Mapping[tuple[str, str], ResourceClaim],
    templates: Mapping[tuple[str, str], ResourceClaimTemplate],
) -> tuple[ClaimLookup, TemplateLookup]:
    """Lookups over dictionaries keyed by (namespace, name)."""
    return (
        lambda namespace, name: claims.get((namespace, name)),
        lambda namespace, name: templates.get((namespace, name)),
    )
