"""What claim placement keeps between pods: CEL inputs, selector verdicts, device scans.

A cluster has thousands of devices but few distinct requests (most pods of a team write the
same class and selectors), so each level is computed once and looked up after: a device's CEL
input, a selector's verdict on it, and the scan of every slice for one kind of request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

from gpupool.kube.objects.dra.cel import (
    COMPILER,
    CelDevice,
    CompiledSelector,
    SelectorCompiler,
    Verdict,
    cel_device,
)
from gpupool.kube.objects.dra.records import Device, ResourceSlice

SCANS_KEPT = 256
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EligibleDevices:
    """The devices a request may use.

    Attributes:
        by_node: Node name to eligible device names, in slice order.
        uuids: Device name to UUID per node (to map GPUs onto snapshot columns).
        errors: Selector evaluation errors (a few), for the pending reason when none matches.
    """

    by_node: dict[str, tuple[str, ...]] = field(default_factory=dict)
    uuids: dict[str, dict[str, str]] = field(default_factory=dict)
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceScan:
    """One kind of request's eligible devices, and the most memory a device of its kind has."""

    eligible: EligibleDevices
    largest: int
    """The most memory a device of the request's kind has (MiB), for the share check."""


class DeviceCache:
    """CEL inputs and selector verdicts of slice devices, per slice generation.

    Evaluating CEL costs tens of microseconds per device and selector, and a cluster has
    thousands of devices but few distinct selectors (most pods of a team write the same ones),
    so a verdict is kept per (expression, slice, generation, device): a pod like an earlier one
    costs dictionary lookups, and a slice that changes gets a new generation, hence new keys.
    Both maps are bounded; past ``limit`` entries they start again empty.
    """

    def __init__(self, compiler: SelectorCompiler = COMPILER, limit: int = 1_000_000) -> None:
        self._compiler = compiler
        self._limit = limit
        self._devices: dict[tuple[str, int, str], CelDevice] = {}
        self._verdicts: dict[tuple[str, str, int, str], Verdict] = {}
        self._memo: dict[tuple[object, ...], tuple[Sequence[ResourceSlice], object]] = {}

    def of_slices(
        self, key: tuple[object, ...], slices: Sequence[ResourceSlice], run: Callable[[], T]
    ) -> T:
        """``run()`` for ``key``, computed once while the caller hands the same slice list.

        Verdicts alone left a claim pod at one pass over every device of the cluster: with
        5,000 claim pods on 1,000 nodes of 8 GPUs the control plane bound none in 15 minutes,
        translating (the live bench's claims phase). Requests of one class with the same
        selectors and tolerations see the same devices, so their scan (and the most GPUs a
        node has) is kept while the list object is the same one
        (:class:`~gpupool.kube.scheduler.dra.claims.ClaimBook`
        makes a new one when a slice changes).
        """
        found = self._memo.get(key)
        if found is not None and found[0] is slices:
            return cast(T, found[1])
        if len(self._memo) >= SCANS_KEPT:
            self._memo.clear()
        value = run()
        self._memo[key] = (slices, value)
        return value

    def get(self, resource_slice: ResourceSlice, device: Device) -> CelDevice:
        """The CEL input of one device of ``resource_slice``.

        Raises:
            ValueError: A ``version`` attribute that is not semver.
        """
        key = (resource_slice.metadata.uid, resource_slice.spec.pool.generation, device.name)
        found = self._devices.get(key)
        if found is None:
            if len(self._devices) >= self._limit:
                self._devices.clear()
            found = cel_device(resource_slice.spec.driver, device, self._compiler.values)
            self._devices[key] = found
        return found

    def verdict(
        self, selector: CompiledSelector, resource_slice: ResourceSlice, device: Device
    ) -> Verdict:
        """``selector`` evaluated on one device (cached).

        Raises:
            ValueError: A ``version`` attribute that is not semver.
        """
        key = (
            selector.expression,
            resource_slice.metadata.uid,
            resource_slice.spec.pool.generation,
            device.name,
        )
        found = self._verdicts.get(key)
        if found is None:
            if len(self._verdicts) >= self._limit:
                self._verdicts.clear()
            found = selector.evaluate(self.get(resource_slice, device))
            self._verdicts[key] = found
        return found
