"""A claim pod's eligible devices as the snapshot's GPU columns, made once per kind of request.

Most claim pods of a cluster ask alike (one class, the same selectors), so the device cache
hands them one scan (:class:`~gpupool.kube.objects.dra.device_cache.DeviceCache`), and this module
turns a scan into the engine's :class:`~gpupool.scheduling.claim_placement.GpuEligibility`
once per snapshot, rather than mapping the devices onto columns and building the mask on every
try of every claim pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects.dra.claim_devices import gpu_columns
from gpupool.kube.objects.dra.device_cache import EligibleDevices
from gpupool.scheduling.claim_placement import GpuEligibility

ELIGIBILITIES_KEPT = 256
Uuids = dict[str, tuple[str, ...]]


def columns_of(
    eligible: EligibleDevices, snapshot: ClusterSnapshot, uuids: Uuids
) -> dict[int, frozenset[int]]:
    """Per node row of ``snapshot``, the GPU columns of the eligible devices."""
    columns: dict[int, frozenset[int]] = {}
    for node in eligible.by_node:
        row = snapshot.node_index.get(node)
        if row is not None:
            columns[row] = gpu_columns(eligible, node, uuids.get(node, ()))
    return columns


def mig_eligibility(
    eligible: EligibleDevices, snapshot: ClusterSnapshot, uuids: Uuids, taken: set[tuple[str, str]]
) -> GpuEligibility:
    """A MIG claim's instances that no claim holds (``taken``), asked afresh every time."""
    migs: dict[int, tuple[str, ...]] = {}
    for node, names in eligible.by_node.items():
        row = snapshot.node_index.get(node)
        if row is not None:
            migs[row] = tuple(n for n in names if (node, n) not in taken)
    return GpuEligibility(columns_of(eligible, snapshot, uuids), migs)


@dataclass(frozen=True, slots=True)
class _Made:
    inputs: tuple[EligibleDevices, ClusterSnapshot, Uuids]
    eligibility: GpuEligibility


@dataclass
class EligibilityCache:
    """Whole-GPU and share eligibilities by scan, snapshot and node UUIDs.

    Compared by identity: a new scan, snapshot or UUID map is a new object (slices or nodes
    changed), never an old one changed in place.
    """

    _made: dict[int, _Made] = field(default_factory=dict)

    def of(
        self, eligible: EligibleDevices, snapshot: ClusterSnapshot, uuids: Uuids
    ) -> GpuEligibility:
        """The eligibility of ``eligible`` over ``snapshot``, with its mask."""
        inputs = (eligible, snapshot, uuids)
        known = self._made.get(id(eligible))
        if known is not None and all(a is b for a, b in zip(known.inputs, inputs, strict=True)):
            return known.eligibility
        if len(self._made) >= ELIGIBILITIES_KEPT:
            self._made.clear()
        made = GpuEligibility.over(snapshot, columns_of(eligible, snapshot, uuids))
        self._made[id(eligible)] = _Made(inputs, made)
        return made
