"""Each gpupool resource value on its own: known name, whole number, allowed range.

The scheduler's translation (:func:`gpupool.kube.objects.translate.pod_spec`) judges the request as
a whole (sums over containers, MIG excluding shares); this module judges every single value first,
so a refusal says which container and which range (``1..100``, ``1..141312 MiB, the largest GPU in
the cluster``) rather than only that the sum is wrong.

It also bounds the size of every quantity the translation will parse. Quantities are exact
fractions, and ``1e999999999`` would make the parser build a number with a billion digits: one
such pod would stall the webhook (and every admission waiting on it) for minutes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from gpupool.kube.objects.quantity import QuantityError, parse_quantity
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.vocabulary import (
    RESOURCE_GPU,
    RESOURCE_GPU_CORES,
    RESOURCE_GPU_MEMORY,
    RESOURCE_MIG_PREFIX,
    RESOURCE_PREFIX,
)
from gpupool.webhook.facts import ClusterFacts
from gpupool.webhook.refusal import Refusal

GPUPOOL_PREFIX = RESOURCE_PREFIX
PARSED_ELSEWHERE = ("cpu", "memory")
"""Resources the translation parses besides gpupool's own."""
MAX_QUANTITY_CHARS = 64
MAX_EXPONENT = 30
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)$")
KNOWN = (
    f"{RESOURCE_GPU}, {RESOURCE_GPU_MEMORY}, {RESOURCE_GPU_CORES}, {RESOURCE_MIG_PREFIX}<profile>"
)


@dataclass(frozen=True, slots=True)
class ResourceValue:
    """One resource amount and the path it was found at."""

    name: str
    amount: str
    path: str


@dataclass(frozen=True, slots=True)
class _Range:
    unit: str
    low: int
    high: int | None = None
    why: str = ""

    def describe(self) -> str:
        bounds = f">= {self.low}" if self.high is None else f"in {self.low}..{self.high}"
        why = f" ({self.why})" if self.why else ""
        return f"a whole number of {self.unit} {bounds}{why}"


def resource_values(pod: PodRecord) -> Iterator[ResourceValue]:
    """Every amount in the containers', init containers' and overhead's resources."""
    for kind, containers in (
        ("containers", pod.spec.containers),
        ("initContainers", pod.spec.init_containers),
    ):
        for index, container in enumerate(containers):
            for source in ("limits", "requests"):
                for name, amount in getattr(container.resources, source).items():
                    path = f"spec.{kind}[{index}].resources.{source}[{name}]"
                    yield ResourceValue(name, amount, path)
    for name, amount in pod.spec.overhead.items():
        yield ResourceValue(name, amount, f"spec.overhead[{name}]")


def asks_for_gpupool(pod: PodRecord) -> bool:
    """Whether any container (or the overhead) names a ``gpupool.io/`` resource."""
    return any(value.name.startswith(GPUPOOL_PREFIX) for value in resource_values(pod))


def _bounded(value: ResourceValue) -> Refusal | None:
    exponent = _EXPONENT.search(value.amount)
    if len(value.amount) > MAX_QUANTITY_CHARS or (
        exponent is not None and abs(int(exponent.group(1))) > MAX_EXPONENT
    ):
        return Refusal(
            value.path,
            f"must be a quantity of at most {MAX_QUANTITY_CHARS} characters with an exponent "
            f"within ±{MAX_EXPONENT}, got {value.amount[:MAX_QUANTITY_CHARS]!r}",
        )
    return None


def _range_of(name: str, facts: ClusterFacts | None) -> _Range | str:
    """The allowed range of a gpupool resource, or why its name is refused."""
    nodes = facts if facts is not None and facts.has_gpu_nodes else None
    if name == RESOURCE_GPU:
        if nodes is None:
            return _Range("GPUs", 0)
        return _Range("GPUs", 0, nodes.most_gpus_per_node, "the most GPUs on one node")
    if name == RESOURCE_GPU_CORES:
        return _Range("percent of each GPU's compute", 1, 100)
    if name == RESOURCE_GPU_MEMORY:
        if nodes is None or not nodes.largest_gpu_memory_mib:
            return _Range("MiB per GPU", 1)
        largest = nodes.largest_gpu_memory_mib
        return _Range("MiB per GPU", 1, largest, "the largest GPU in the cluster")
    if name.startswith(RESOURCE_MIG_PREFIX):
        profile = name.removeprefix(RESOURCE_MIG_PREFIX)
        if nodes is not None and profile not in nodes.mig_profiles:
            offered = ", ".join(sorted(nodes.mig_profiles)) or "none"
            return f"unknown MIG profile {profile!r}; the nodes offer: {offered}"
        return _Range("MIG slices", 1, 1, "one slice per pod")
    return f"unknown gpupool resource {name!r}; allowed: {KNOWN}"


def check_value(value: ResourceValue, facts: ClusterFacts | None) -> Refusal | None:
    """Refuse one amount that is unbounded, or a gpupool amount out of its range."""
    refusal = _bounded(value)
    if refusal is not None or not value.name.startswith(GPUPOOL_PREFIX):
        return refusal
    allowed = _range_of(value.name, facts)
    if isinstance(allowed, str):
        return Refusal(value.path, allowed)
    try:
        number = parse_quantity(value.amount)
    except QuantityError:
        number = None
    if (
        number is None
        or number.denominator != 1
        or number < allowed.low
        or (allowed.high is not None and number > allowed.high)
    ):
        return Refusal(value.path, f"must be {allowed.describe()}, got {value.amount!r}")
    return None


def check_resources(pod: PodRecord, facts: ClusterFacts | None) -> Refusal | None:
    """The first refused resource value of ``pod``, or None when every value is acceptable.

    Besides each value's range, a gpupool resource given both as a limit and as a request must
    have the same amount in both (extended resources cannot be overcommitted; the API server
    refuses it later anyway, but the translation would read only the request).
    """
    limits: dict[tuple[str, str], ResourceValue] = {}
    for value in resource_values(pod):
        if value.name not in PARSED_ELSEWHERE and not value.name.startswith(GPUPOOL_PREFIX):
            continue
        refusal = check_value(value, facts)
        if refusal is not None:
            return refusal
        if not value.name.startswith(GPUPOOL_PREFIX):
            continue
        container = value.path.split(".resources.", 1)[0]
        if ".resources.limits[" in value.path:
            limits[container, value.name] = value
            continue
        limit = limits.get((container, value.name))
        if limit is not None and parse_quantity(limit.amount) != parse_quantity(value.amount):
            return Refusal(
                value.path,
                f"must equal {limit.path} ({limit.amount!r}): a GPU request cannot be "
                f"overcommitted, got {value.amount!r}",
            )
    return None
