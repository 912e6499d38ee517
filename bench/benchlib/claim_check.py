"""An independent check of the devices gpupool's scheduler allocated to ResourceClaims.

The claim-side twin of :mod:`benchlib.allocation_check`: it reads the claims' raw JSON (no
decoding shared with the scheduler) and the slices' capacities, and says what breaks these rules
for the results of gpupool's driver (or, for the live bench's kube-scheduler phase, its own):

* no device is given more memory or compute than its slice lists, in all;
* a device given whole (its full capacity, or any result on a device without shares) or a MIG
  instance is given to one claim alone;
* every result names a device its node's slice has;
* (:func:`partial_results`, for callers whose claims all ask for whole GPUs) no result holds
  less than its whole device.

The unit tests, the integration test and the live bench ask it the same question.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from gpupool.kube.objects.quantity import parse_quantity

DRIVER = "gpu.gpupool.io"
Json = dict[str, Any]


def claim_results(claim: Json, driver: str = DRIVER) -> list[Json]:
    """The claim's results of ``driver`` (none while unallocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [r for r in results if r.get("driver") == driver]


def _capacities(slices: Iterable[Json], driver: str) -> dict[str, dict[str, Fraction]]:
    found: dict[str, dict[str, Fraction]] = {}
    for item in slices:
        spec = item.get("spec", {})
        if spec.get("driver") != driver:
            continue
        for device in spec.get("devices", []):
            key = f"{spec.get('nodeName')}/{device['name']}"
            found[key] = {
                name: parse_quantity(value["value"])
                for name, value in device.get("capacity", {}).items()
            }
    return found


def partial_results(
    claims: Iterable[Json], slices: Iterable[Json], driver: str = DRIVER
) -> list[str]:
    """Results of ``driver`` that hold less than their whole device, for claims of whole GPUs.

    :func:`claim_problems` cannot tell a share from a whole GPU asked for and half given: a
    caller whose claims all ask for whole devices (the live bench) asks this too.
    """
    capacity = _capacities(slices, driver)
    problems: list[str] = []
    for claim in claims:
        meta = claim["metadata"]
        for result in claim_results(claim, driver):
            device = f"{result['pool']}/{result['device']}"
            consumed = {k: parse_quantity(v) for k, v in result.get("consumedCapacity", {}).items()}
            if consumed and consumed != capacity.get(device):
                problems.append(
                    f"{meta['namespace']}/{meta['name']}: {device} given in part, "
                    f"{_quantities(consumed)} of {_quantities(capacity.get(device, {}))}"
                )
    return problems


def _quantities(amounts: dict[str, Fraction]) -> str:
    return ", ".join(f"{key} {amount}" for key, amount in sorted(amounts.items())) or "nothing"


def claim_problems(
    claims: Iterable[Json], slices: Iterable[Json], driver: str = DRIVER
) -> list[str]:
    """Every way the claims' allocations of ``driver`` break the rules above ([] when none)."""
    capacity = _capacities(slices, driver)
    used: dict[str, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    holders: dict[str, list[str]] = defaultdict(list)
    exclusive: set[str] = set()
    problems: list[str] = []
    for claim in claims:
        meta = claim["metadata"]
        name = f"{meta['namespace']}/{meta['name']}"
        for result in claim_results(claim, driver):
            device = f"{result['pool']}/{result['device']}"
            if device not in capacity:
                problems.append(f"{name}: {device} is no device of its node's slice")
                continue
            holders[device].append(name)
            consumed = {k: parse_quantity(v) for k, v in result.get("consumedCapacity", {}).items()}
            if not consumed or consumed == capacity[device]:
                exclusive.add(device)
            for key, amount in consumed.items():
                used[device][key] += amount
    for device, names in sorted(holders.items()):
        if device in exclusive and len(names) > 1:
            problems.append(f"{device}: given whole and to others: {', '.join(names)}")
        for key, amount in used[device].items():
            if amount > capacity[device].get(key, Fraction(0)):
                problems.append(f"{device}: {key} {amount} given, capacity {capacity[device][key]}")
    return problems
