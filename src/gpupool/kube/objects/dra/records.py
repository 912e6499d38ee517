"""gpupool's GPUs as Dynamic Resource Allocation objects: the names, and slim records of them.

One module for what the agent publishes (a ResourceSlice per node), what gpupool installs
(DeviceClasses) and what the scheduler and the agent read back (ResourceClaims and their
templates), so the device names, attribute names and classes cannot drift between the node and
the scheduler.

The vocabulary:

* driver ``gpu.gpupool.io``; one pool per node, named like the node, in one ResourceSlice;
* a GPU not in MIG mode is the device ``gpu-<nvml index>`` with ``allowMultipleAllocations``
  and two consumable capacities: ``memory`` (bytes, requested in steps of 1 MiB) and ``compute``
  (``1`` = the whole GPU; a share asks for e.g. ``300m``);
* a MIG instance is the device ``mig-<nvml index>-<n>`` (pre-partitioned: the agent reads the
  instances an administrator made and creates none, so it cannot promise partitions);
* attributes (all in the driver's domain): ``type`` (``gpu`` or ``mig``), ``model``,
  ``productName``, ``uuid``, ``index``, ``migCapable``, ``migEnabled``, ``driverVersion`` (a
  semantic version), and for MIG devices ``profile``, ``parentUUID``, ``parentIndex``;
* a GPU broken by a critical XID carries the taint ``gpu.gpupool.io/unhealthy`` (NoSchedule).

The records decode only the fields gpupool reads, like :mod:`gpupool.kube.objects.records`; the
ResourceSlice record is also what the agent encodes (``omit_defaults`` keeps its JSON minimal).
"""

from __future__ import annotations

import msgspec

from gpupool.kube.objects.records import KubeObject

DRIVER = "gpu.gpupool.io"
API_VERSION = "resource.k8s.io/v1"
API_PREFIX = f"/apis/{API_VERSION}"
SLICES_PATH = f"{API_PREFIX}/resourceslices"
CLASSES_PATH = f"{API_PREFIX}/deviceclasses"

ATTRIBUTE_TYPE = "type"
TYPE_GPU = "gpu"
TYPE_MIG = "mig"
CAPACITY_MEMORY = "memory"
CAPACITY_COMPUTE = "compute"
TAINT_UNHEALTHY = f"{DRIVER}/unhealthy"

CLASS_WHOLE = "gpu.gpupool.io"
CLASS_SHARE = "gpu-share.gpupool.io"
CLASS_MIG_SUFFIX = ".gpupool.io"
LABEL_REQUEST_KIND = "gpupool.io/request-kind"
"""DeviceClass label: ``whole``, ``share`` or ``mig``: how gpupool places a request of it."""
LABEL_MIG_PROFILE = "gpupool.io/mig-profile"
"""DeviceClass label of a MIG class: the profile (``1g.10gb``)."""

CLAIM_RECORD_KEY = "gpupool.io/claim-allocation"
"""Key, in the ``data`` of gpupool's entry in a claim's ``status.devices``, of the record gpupool's
scheduler writes with ``status.allocation`` (:mod:`gpupool.kube.objects.dra.claim_record`): the
allocation it made, signed for the claim's uid like the pod record."""


def gpu_device_name(index: int) -> str:
    """The device of the GPU with NVML index ``index``."""
    return f"gpu-{index}"


def mig_device_name(parent_index: int, position: int) -> str:
    """The device of the ``position``-th MIG instance of GPU ``parent_index``."""
    return f"mig-{parent_index}-{position}"


def mig_class_name(profile: str) -> str:
    """The DeviceClass of a MIG profile: ``1g.10gb`` -> ``mig-1g.10gb.gpupool.io``."""
    return f"mig-{profile}{CLASS_MIG_SUFFIX}"


def slice_name(node: str) -> str:
    """The name of the one ResourceSlice of ``node`` (a DNS subdomain, like the node's)."""
    return f"{node}-{DRIVER}"[:253]


class DeviceAttribute(msgspec.Struct, frozen=True, omit_defaults=True):
    """One attribute value; exactly one field is set."""

    integer: int | None = msgspec.field(default=None, name="int")
    boolean: bool | None = msgspec.field(default=None, name="bool")
    string: str | None = None
    version: str | None = None

    def value(self) -> object:
        """The value that is set (None if none is)."""
        for candidate in (self.integer, self.boolean, self.string, self.version):
            if candidate is not None:
                return candidate
        return None


class CapacityRange(msgspec.Struct, frozen=True, omit_defaults=True):
    """``requestPolicy.validRange``: requests are rounded up to ``min + n * step``.

    ``min`` has no default on purpose: ``omit_defaults`` would leave out a ``"0"`` default, and
    the API server requires the field (the same for :class:`RequestPolicy`'s ``default``).
    """

    min: str
    max: str | None = None
    step: str | None = None


class RequestPolicy(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """How a request consumes a capacity of a shared device."""

    default: str
    valid_range: CapacityRange | None = None


class DeviceCapacity(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """A capacity of a device and how requests consume it."""

    value: str
    request_policy: RequestPolicy | None = None


class DeviceTaint(msgspec.Struct, frozen=True, omit_defaults=True):
    """A taint on one device."""

    key: str
    effect: str
    value: str = ""


class Device(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """One device of a ResourceSlice."""

    name: str
    attributes: dict[str, DeviceAttribute] = {}
    capacity: dict[str, DeviceCapacity] = {}
    allow_multiple_allocations: bool | None = None
    taints: tuple[DeviceTaint, ...] = ()


class ResourcePool(msgspec.Struct, frozen=True, rename="camel"):
    """The pool a slice belongs to; ``generation`` grows with every change of its devices."""

    name: str
    generation: int = 0
    resource_slice_count: int = 1


class ResourceSliceSpec(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """The spec fields gpupool writes and reads."""

    driver: str
    pool: ResourcePool
    node_name: str | None = None
    devices: tuple[Device, ...] = ()


class ResourceSlice(KubeObject, frozen=True):
    """A ResourceSlice."""

    spec: ResourceSliceSpec = ResourceSliceSpec(driver="", pool=ResourcePool(name=""))

    @property
    def key(self) -> str:
        """The slice's name (cluster-scoped)."""
        return self.metadata.name


class CelSelector(msgspec.Struct, frozen=True):
    """``cel.expression`` of a device selector."""

    expression: str = ""


class DeviceSelector(msgspec.Struct, frozen=True):
    """A device selector (only CEL exists in resource.k8s.io/v1)."""

    cel: CelSelector | None = None


class DeviceClassSpec(msgspec.Struct, frozen=True, rename="camel"):
    """The DeviceClass fields gpupool reads."""

    selectors: tuple[DeviceSelector, ...] = ()
    extended_resource_name: str | None = None


class DeviceClass(KubeObject, frozen=True):
    """A DeviceClass."""

    spec: DeviceClassSpec = DeviceClassSpec()


class DeviceToleration(msgspec.Struct, frozen=True):
    """A request's toleration of device taints."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class CapacityRequirements(msgspec.Struct, frozen=True):
    """``capacity.requests``: how much of each capacity of a shared device a request takes."""

    requests: dict[str, str] = {}


class ExactDeviceRequest(msgspec.Struct, frozen=True, rename="camel"):
    """``exactly`` of a device request."""

    device_class_name: str = ""
    selectors: tuple[DeviceSelector, ...] = ()
    allocation_mode: str = "ExactCount"
    count: int = 1
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity: CapacityRequirements | None = None


class DeviceRequest(msgspec.Struct, frozen=True, rename="camel"):
    """One request of a claim (``exactly`` or a prioritized ``firstAvailable`` list)."""

    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: tuple[msgspec.Raw, ...] = ()


class DeviceClaim(msgspec.Struct, frozen=True):
    """``spec.devices`` of a claim."""

    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[msgspec.Raw, ...] = ()


class ResourceClaimSpec(msgspec.Struct, frozen=True):
    """The spec of a claim (and of a claim template's claims)."""

    devices: DeviceClaim = DeviceClaim()


class DeviceRequestAllocationResult(
    msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"
):
    """One allocated device of a claim."""

    request: str
    driver: str
    pool: str
    device: str
    share_id: str | None = msgspec.field(default=None, name="shareID")
    consumed_capacity: dict[str, str] = {}
    tolerations: tuple[DeviceToleration, ...] = ()


class DeviceAllocationResult(msgspec.Struct, frozen=True, omit_defaults=True):
    """``status.allocation.devices``."""

    results: tuple[DeviceRequestAllocationResult, ...] = ()


class AllocationResult(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """``status.allocation``: the devices and where the claim can be used."""

    devices: DeviceAllocationResult = DeviceAllocationResult()
    node_selector: dict[str, object] | None = None


class ConsumerReference(msgspec.Struct, frozen=True, rename="camel"):
    """One entry of ``status.reservedFor``."""

    resource: str = ""
    name: str = ""
    uid: str = ""
    api_group: str = ""


class AllocatedDeviceStatus(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """One entry of ``status.devices``: what a driver says about a device allocated to the claim.

    The API server requires driver, pool, device and share to name an allocated one.
    """

    driver: str
    pool: str
    device: str
    share_id: str | None = msgspec.field(default=None, name="shareID")
    data: dict[str, object] | None = None


class ResourceClaimStatus(msgspec.Struct, frozen=True, rename="camel"):
    """The claim status fields gpupool reads."""

    allocation: AllocationResult | None = None
    reserved_for: tuple[ConsumerReference, ...] = ()
    devices: tuple[AllocatedDeviceStatus, ...] = ()


class ResourceClaim(KubeObject, frozen=True):
    """A ResourceClaim."""

    spec: ResourceClaimSpec = ResourceClaimSpec()
    status: ResourceClaimStatus = ResourceClaimStatus()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.metadata.namespace}/{self.metadata.name}"


class ClaimTemplateSpec(msgspec.Struct, frozen=True):
    """``spec`` of a ResourceClaimTemplate: the spec of the claims made from it."""

    spec: ResourceClaimSpec = ResourceClaimSpec()


class ResourceClaimTemplate(KubeObject, frozen=True):
    """A ResourceClaimTemplate."""

    spec: ClaimTemplateSpec = ClaimTemplateSpec()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.metadata.namespace}/{self.metadata.name}"
