"""The scheduler's view of DRA: claims, slices and classes in; claim pods' plans and holdings out.

A pod whose GPUs come from a ResourceClaim of gpupool's driver is placed like any other pod: its
claim is translated once (:func:`gpupool.kube.objects.dra.claim_devices.translate_pod_claims`) into
the core's request and the GPUs its selectors admit (a :class:`GpuEligibility` the engine applies
as a node check and to its GPU choice). What is new here is who holds the GPUs:

* the **claim** holds them, under the snapshot name ``claim:<uid>``, so a claim several pods
  share is counted once, and its GPUs stay held while any pod still reserves it;
* each **pod** holds its CPU and memory only (its own request has no GPUs:
  :func:`~gpupool.kube.objects.translate.pod_spec`), and its signed allocation record says so.

A pending pod whose claim is already allocated (another pod reserved it) joins it: it asks for
its CPU and memory on the claim's node, and the binder adds it to ``reservedFor``.

What a claim holds after a restart comes from its ``status.allocation`` (every gpupool result,
believed or not: holding what someone wrote is safe, ignoring it could give a GPU twice; a
claim without the scheduler's signed record gets a warning in the log, and the agent will not
prepare it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpupool.core.decisions import Bind
from gpupool.core.model import MILLI_PER_GPU, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.client.informer import DELETED
from gpupool.kube.objects.dra import claim_record
from gpupool.kube.objects.dra.claim_devices import (
    allocation_result,
    device_of_column,
    translate_pod_claims,
)
from gpupool.kube.objects.dra.claims import GpupoolRequest, claim_lookups, claim_pod_spec
from gpupool.kube.objects.dra.device_cache import DeviceCache, EligibleDevices
from gpupool.kube.objects.dra.records import (
    CAPACITY_COMPUTE,
    CAPACITY_MEMORY,
    AllocationResult,
    Device,
    DeviceClass,
    DeviceRequestAllocationResult,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from gpupool.kube.objects.quantity import MIB, parse_quantity
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.signing import RecordSigner
from gpupool.kube.objects.translate import InvalidObjectError, pod_spec
from gpupool.kube.scheduler.dra.claim_eligibility import EligibilityCache, mig_eligibility
from gpupool.scheduling.claim_placement import GpuEligibility

log = logging.getLogger(__name__)

CLAIM_KEY = "claim:"
"""Prefix of a claim's name in the snapshot (pod uids never contain a colon)."""


def claim_key(uid: str) -> str:
    """The snapshot name under which a claim holds its GPUs."""
    return f"{CLAIM_KEY}{uid}"


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """What the scheduler does for one claim pod once it is placed.

    Attributes:
        claim: The claim (as cached when the pod was translated).
        request: Its gpupool request; None when the pod joins a claim already allocated.
        eligible: The devices the request may use (None when joining).
    """

    claim: ResourceClaim
    request: GpupoolRequest | None = None
    eligible: EligibleDevices | None = None


@dataclass(frozen=True, slots=True)
class ClaimBind:
    """A claim pod's decision as the binder carries it out.

    Attributes:
        plan: The claim and its request.
        allocation: The claim's new allocation (None: the pod joins an allocated claim).
        pod_bind: The pod's own part of the decision (CPU and memory, no GPUs), for its record.
    """

    plan: ClaimPlan
    allocation: AllocationResult | None
    pod_bind: Bind


@dataclass(frozen=True, slots=True)
class ClaimPlacement:
    """A claim pod as the engine places it: its request, its GPUs' eligibility, the plan."""

    spec: PodSpec
    eligibility: GpuEligibility
    plan: ClaimPlan


def without_gpus(spec: PodSpec) -> PodSpec:
    """A claim pod's own part of its request: its claim holds the GPUs."""
    return replace(spec, gpu_count=0, gpu_milli=0, gpu_memory_mib=0, mig_profile="")


def gpupool_results(claim: ResourceClaim) -> tuple[DeviceRequestAllocationResult, ...]:
    """The claim's allocated devices of gpupool's driver."""
    return claim_record.gpupool_results(claim.status.allocation)


@dataclass
class ClaimBook:
    """The DRA records the scheduler reads, kept by its informers.

    Attributes:
        claims: ResourceClaims by (namespace, name).
        templates: ResourceClaimTemplates by (namespace, name).
        classes: DeviceClasses by name.
        slices: gpupool's ResourceSlices by node.
        assumed: Allocations decided but not yet seen in a claim's status, by claim uid.
    """

    claims: dict[tuple[str, str], ResourceClaim] = field(default_factory=dict)
    templates: dict[tuple[str, str], ResourceClaimTemplate] = field(default_factory=dict)
    classes: dict[str, DeviceClass] = field(default_factory=dict)
    slices: dict[str, ResourceSlice] = field(default_factory=dict)
    assumed: dict[str, AllocationResult] = field(default_factory=dict)
    cache: DeviceCache = field(default_factory=DeviceCache)
    by_uid: dict[str, ResourceClaim] = field(default_factory=dict)
    _in_order: tuple[ResourceSlice, ...] | None = None
    _eligibility: EligibilityCache = field(default_factory=EligibilityCache)

    def on_claim(self, kind: str, claim: ResourceClaim) -> None:
        """Informer handler for ResourceClaims."""
        key = (claim.metadata.namespace, claim.metadata.name)
        if kind == DELETED:
            self.claims.pop(key, None)
            self.by_uid.pop(claim.metadata.uid, None)
            return
        known = self.by_uid.get(claim.metadata.uid)
        if known is not None and _older(claim, known):
            return  # the write's answer came first; the watch is catching up
        self.claims[key] = claim
        self.by_uid[claim.metadata.uid] = claim
        if gpupool_results(claim):
            self.assumed.pop(claim.metadata.uid, None)

    def on_template(self, kind: str, template: ResourceClaimTemplate) -> None:
        """Informer handler for ResourceClaimTemplates."""
        key = (template.metadata.namespace, template.metadata.name)
        if kind == DELETED:
            self.templates.pop(key, None)
        else:
            self.templates[key] = template

    def on_class(self, kind: str, device_class: DeviceClass) -> None:
        """Informer handler for DeviceClasses."""
        if kind == DELETED:
            self.classes.pop(device_class.metadata.name, None)
        else:
            self.classes[device_class.metadata.name] = device_class

    def on_slice(self, kind: str, resource_slice: ResourceSlice) -> None:
        """Informer handler for ResourceSlices (one per node for gpupool's driver)."""
        node = resource_slice.spec.node_name
        if not node:
            return
        if kind == DELETED:
            self.slices.pop(node, None)
        else:
            self.slices[node] = resource_slice
        self._in_order = None  # a new list object: the device cache's scans start again

    def _slice_list(self) -> tuple[ResourceSlice, ...]:
        """The slices in node order, one object until a slice changes."""
        if self._in_order is None:
            self._in_order = tuple(self.slices[n] for n in sorted(self.slices))
        return self._in_order

    # -- pending claim pods ------------------------------------------------------------------

    def placement(
        self, pod: PodRecord, snapshot: ClusterSnapshot, uuids: dict[str, tuple[str, ...]]
    ) -> ClaimPlacement | None:
        """How the engine places a pod with claims (None: it has none of gpupool's).

        Raises:
            InvalidObjectError: The pod cannot be placed as asked; the message names the field.
        """
        claims, templates = claim_lookups(self.claims, self.templates)
        translated = translate_pod_claims(
            pod, claims, templates, self.classes.get, self._slice_list(), self.cache
        )
        if translated is None:
            return None
        request = translated.request
        source = request.source
        claim = self.claims.get((source.namespace, source.claim)) if source.claim else None
        if claim is None:
            raise InvalidObjectError(
                f"pod {pod.key}",
                f"spec.resourceClaims[{source.pod_claim}]",
                f"waiting for the ResourceClaim of {source.field} to be created",
            )
        results = gpupool_results(claim) or self._assumed_results(claim)
        if results:  # joining a claim another pod already holds: CPU and memory on its node
            claim_pod_spec(pod, request)  # the same refusals as for the first pod
            row = snapshot.node_index.get(results[0].pool)
            rows = {row: frozenset[int]()} if row is not None else {}
            return ClaimPlacement(pod_spec(pod), GpuEligibility(rows), ClaimPlan(claim))
        eligible = translated.eligible
        if eligible.errors and not any(eligible.by_node.values()):
            raise InvalidObjectError(
                f"pod {pod.key}",
                f"{request.field}.exactly.selectors",
                f"no device matches; evaluating them failed: {'; '.join(eligible.errors)}",
            )
        if request.kind == "mig":
            eligibility = mig_eligibility(eligible, snapshot, uuids, self.taken_mig_devices())
        else:
            eligibility = self._eligibility.of(eligible, snapshot, uuids)
        return ClaimPlacement(translated.spec, eligibility, ClaimPlan(claim, request, eligible))

    def _assumed_results(self, claim: ResourceClaim) -> tuple[DeviceRequestAllocationResult, ...]:
        assumed = self.assumed.get(claim.metadata.uid)
        return claim_record.gpupool_results(assumed)

    def taken_mig_devices(self) -> set[tuple[str, str]]:
        """(node, device) of every MIG instance a claim holds or is being given."""
        allocations = [c.status.allocation for c in self.by_uid.values()]
        taken = set()
        for allocation in [*allocations, *self.assumed.values()]:
            for result in claim_record.gpupool_results(allocation):
                if self._is_mig(result):
                    taken.add((result.pool, result.device))
        return taken

    def _device(self, node: str, name: str) -> Device | None:
        resource_slice = self.slices.get(node)
        if resource_slice is None:
            return None
        return next((d for d in resource_slice.spec.devices if d.name == name), None)

    def _is_mig(self, result: DeviceRequestAllocationResult) -> bool:
        device = self._device(result.pool, result.device)
        return device is not None and "profile" in device.attributes

    def allocation(
        self,
        plan: ClaimPlan,
        node: str,
        gpus: Sequence[int],
        uuids: tuple[str, ...],
    ) -> AllocationResult:
        """The allocation of ``plan``'s claim for a decision on ``node`` with GPU columns ``gpus``.

        Raises:
            KeyError: The node has no free eligible MIG instance, or a GPU no device (the
                slice changed since the pod was translated).
        """
        assert plan.request is not None
        assert plan.eligible is not None
        request, eligible = plan.request, plan.eligible
        if request.kind == "mig":
            taken = self.taken_mig_devices()
            free = [n for n in eligible.by_node.get(node, ()) if (node, n) not in taken]
            if not free:
                raise KeyError(f"node {node}: no free {request.mig_profile} instance")
            devices = free[:1]
        else:
            devices = [device_of_column(eligible, node, uuids[i]) for i in gpus]
        slice_devices = {d.name: d for d in self.slices[node].spec.devices}
        return allocation_result(request, node, devices, slice_devices)

    # -- what allocated claims hold ----------------------------------------------------------

    def held(
        self, claim: ResourceClaim, snapshot: ClusterSnapshot, uuids: dict[str, tuple[str, ...]]
    ) -> tuple[PodSpec, int, tuple[int, ...]] | None:
        """What an allocated claim holds: its GPU request, node row and GPU columns.

        None when it holds nothing here (no gpupool results, or a node not scheduled onto).
        """
        results = gpupool_results(claim) or self._assumed_results(claim)
        if not results or results[0].pool not in snapshot.node_index:
            return None
        node = results[0].pool
        name = claim_key(claim.metadata.uid)
        first = self._device(node, results[0].device)
        if first is not None and "profile" in first.attributes:
            profile = str(first.attributes["profile"].value())
            return PodSpec(name, 0, 0, mig_profile=profile), snapshot.node_index[node], ()
        node_uuids = uuids.get(node, ())
        columns = []
        for result in results:
            device = self._device(node, result.device)
            attribute = device.attributes.get("uuid") if device is not None else None
            gpu = str(attribute.value()) if attribute is not None else ""
            if gpu in node_uuids:
                columns.append(node_uuids.index(gpu))
        milli, memory = _consumed(results[0], self._device(node, results[0].device))
        spec = PodSpec(name, 0, 0, len(columns), milli if columns else 0, memory if columns else 0)
        return spec, snapshot.node_index[node], tuple(columns)

    def trusted(self, claim: ResourceClaim, signer: RecordSigner | None) -> bool:
        """Whether the claim's allocation carries the scheduler's signed record, equal to it."""
        text = claim_record.record_text(claim)
        if text is None or signer is None:
            return False
        try:
            record = claim_record.decode(text)
        except claim_record.ClaimRecordError:
            return False
        return record.results == gpupool_results(claim) and signer.verify(
            record, claim.metadata.uid
        )


def _consumed(result: DeviceRequestAllocationResult, device: Device | None) -> tuple[int, int]:
    """(milli, memory MiB) a result takes of its GPU: all of it for an exclusive one.

    A whole GPU is written as consuming the device's full capacity (or, on a device that is
    not shared, nothing): both are held as a whole GPU, never as a share beside others.
    """
    consumed = result.consumed_capacity
    full = {k: v.value for k, v in device.capacity.items()} if device is not None else {}
    if not consumed or result.share_id is None or consumed == full:
        return MILLI_PER_GPU, 0
    compute = consumed.get(CAPACITY_COMPUTE)
    memory = consumed.get(CAPACITY_MEMORY)
    milli = math.ceil(parse_quantity(compute) * MILLI_PER_GPU) if compute else 0
    mib = math.ceil(parse_quantity(memory) / MIB) if memory else 0
    return milli, mib


def _older(claim: ResourceClaim, known: ResourceClaim) -> bool:
    try:
        return int(claim.metadata.resource_version) < int(known.metadata.resource_version)
    except ValueError:
        return False
