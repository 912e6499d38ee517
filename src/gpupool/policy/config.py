"""Pools and queues from CRD-shaped documents, checked the way the API server checks them.

The simulator reads a YAML file of ``GPUPool`` and ``GPUQueue`` objects with exactly the fields
of docs/crds.md, so a configuration tried in simulation can be applied to a cluster unchanged
and the other way round. In a cluster the API server has validated the objects already; a file
has had no such check, so this module repeats the CRDs' rules and refuses a bad document with
an error naming the object and the field path (``GPUQueue research: spec.quotas[0].ceiling: must
be >= guaranteed``), never a traceback. Parsing is pure: the caller reads the file.

This is the only reader of GPUPool and GPUQueue specs: the scheduler, the node agent, governance
(its idle, grace and share-duration settings are here too) and the admission webhook all parse
the API server's objects with :func:`parse_objects`, so a field cannot mean one thing to one
process and another to the next. :func:`parse_objects` takes the objects one at a time: one that
cannot be used is left out (and reported, naming the field) while the others keep working, as a
process must never stop because of one object.

A rule the CRDs cannot express is added because a file could break it: a pool named ``default``
would collide with the implicit pool. A namespace that two queues serve is allowed (the pod's
queue label chooses, see :func:`gpupool.policy.membership.pod_queue`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpupool.policy.spec import (
    DEFAULT_DISRUPTION_BUDGET_WAIT,
    DEFAULT_IDLE_GRACE,
    DEFAULT_MAX_EVICTION_GRACE,
    DEFAULT_MAX_PODS_PER_GPU,
    DEFAULT_POOL,
    DEFAULT_RECLAIM_GRACE,
    ConsolidationMode,
    ConsolidationSpec,
    ContentionSpec,
    EvictionSpec,
    GovernanceSpec,
    PolicyConfig,
    PoolMode,
    PoolSpec,
    QueueSpec,
    QuotaSpec,
)
from gpupool.policy.spec_reader import PolicyConfigError, SpecReader
from gpupool.policy.units import MILLI_UNITS

_SHARED_DEFAULTS = {
    "maxPodsPerGPU": DEFAULT_MAX_PODS_PER_GPU,
    "memoryOvercommit": 1.0,
    "computeOvercommit": 1.0,
}


def _metadata_name(document: Mapping[str, Any], index: int) -> str:
    kind = document.get("kind", "?")
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise PolicyConfigError(f"document {index} ({kind}): metadata.name: required")
    return name


def _pool(name: str, spec: Mapping[str, Any]) -> PoolSpec:
    read = SpecReader(f"GPUPool {name}")
    mode_text = spec.get("mode")
    modes = {mode.value: mode for mode in PoolMode if mode is not PoolMode.ANY}
    if mode_text not in modes:
        raise read.fail("spec.mode", f"must be one of {', '.join(modes)}, got {mode_text!r}")
    mode = modes[mode_text]
    selector = read.mapping(spec.get("nodeSelector"), "spec.nodeSelector")
    for key, value in selector.items():
        if not isinstance(value, str):
            raise read.fail(f"spec.nodeSelector.{key}", "must be a string")
    shared_raw = spec.get("shared")
    if shared_raw is not None and mode is not PoolMode.SHARED:
        raise read.fail("spec.shared", "only allowed when spec.mode is Shared")
    shared = {**_SHARED_DEFAULTS, **read.mapping(shared_raw, "spec.shared")}
    max_pods = read.integer(shared["maxPodsPerGPU"], "spec.shared.maxPodsPerGPU", 1, 64)
    memory = read.number(
        shared["memoryOvercommit"], "spec.shared.memoryOvercommit", 1.0, 4.0, open_low=False
    )
    compute = read.number(
        shared["computeOvercommit"], "spec.shared.computeOvercommit", 1.0, 4.0, open_low=False
    )
    shared_mode = mode is PoolMode.SHARED
    return PoolSpec(
        name=name,
        mode=mode,
        node_selector=tuple(sorted(selector.items())),
        max_pods_per_gpu=max_pods if shared_mode else None,
        memory_overcommit=memory if shared_mode else 1.0,
        compute_overcommit=compute if shared_mode else 1.0,
        allowed_classes=frozenset(read.strings(spec.get("allowedClasses"), "spec.allowedClasses")),
        allowed_queues=frozenset(read.strings(spec.get("allowedQueues"), "spec.allowedQueues")),
        governance=_governance(read, spec),
        eviction=_eviction(read, spec),
        consolidation=_consolidation(read, spec),
        contention=_contention(read, spec),
    )


def _contention(read: SpecReader, spec: Mapping[str, Any]) -> ContentionSpec:
    contention = read.mapping(spec.get("contention"), "spec.contention")
    unknown = set(contention) - {"avoidAbove"}
    if unknown:
        raise read.fail("spec.contention", f"unknown field(s) {', '.join(sorted(unknown))}")
    above = contention.get("avoidAbove")
    if above is None:
        return ContentionSpec()
    return ContentionSpec(read.number(above, "spec.contention.avoidAbove", 0, 1, open_low=True))


MAX_EVICTION_GRACE = 3600
"""The CRD's bound on ``maxEvictionGracePeriodSeconds``."""


def _eviction(read: SpecReader, spec: Mapping[str, Any]) -> EvictionSpec:
    wait = read.duration(spec, "disruptionBudgetWait", "spec")
    grace = spec.get("maxEvictionGracePeriodSeconds")
    return EvictionSpec(
        budget_wait=wait if wait is not None else DEFAULT_DISRUPTION_BUDGET_WAIT,
        max_grace=(
            DEFAULT_MAX_EVICTION_GRACE
            if grace is None
            else read.integer(grace, "spec.maxEvictionGracePeriodSeconds", 1, MAX_EVICTION_GRACE)
        ),
    )


def _consolidation(read: SpecReader, spec: Mapping[str, Any]) -> ConsolidationSpec:
    path = "spec.consolidation"
    section = read.mapping(spec.get("consolidation"), path)
    defaults = ConsolidationSpec()
    modes = {mode.value: mode for mode in ConsolidationMode}
    mode = section.get("mode", defaults.mode.value)
    if mode not in modes:
        raise read.fail(f"{path}.mode", f"must be one of {', '.join(modes)}, got {mode!r}")
    by_class = read.mapping(section.get("restartCostByClass"), f"{path}.restartCostByClass")
    costs = {name: read.duration(by_class, name, f"{path}.restartCostByClass") for name in by_class}
    restart = read.duration(section, "restartCost", path)
    wait = read.duration(section, "minWait", path)
    moves = section.get("maxMovesPerHour", defaults.max_moves_per_hour)
    per_workload = section.get(
        "maxMovesPerWorkloadPerHour", defaults.max_moves_per_workload_per_hour
    )
    return ConsolidationSpec(
        mode=modes[mode],
        restart_cost=defaults.restart_cost if restart is None else restart,
        class_restart_cost=tuple(sorted((k, v) for k, v in costs.items() if v is not None)),
        max_moves_per_hour=read.integer(moves, f"{path}.maxMovesPerHour", 1, 1000),
        max_moves_per_workload_per_hour=read.integer(
            per_workload, f"{path}.maxMovesPerWorkloadPerHour", 1, 100
        ),
        min_wait=defaults.min_wait if wait is None else wait,
    )


def _governance(read: SpecReader, spec: Mapping[str, Any]) -> GovernanceSpec:
    path = "spec.governance"
    governance = read.mapping(spec.get("governance"), path)
    threshold_spec = read.mapping(governance.get("idleThreshold"), f"{path}.idleThreshold")
    threshold = None
    if governance.get("idleThreshold") is not None:
        threshold = read.number(
            threshold_spec.get("gpuUtilPercent"),
            f"{path}.idleThreshold.gpuUtilPercent",
            0.0,
            100.0,
            open_low=False,
        )
    idle = read.duration(governance, "idleGrace", path)
    if (threshold is None) != (idle is None):
        missing = "idleGrace" if idle is None else "idleThreshold"
        raise read.fail(f"{path}.{missing}", "idleThreshold and idleGrace are set together")
    longest = read.duration(governance, "maxShareDuration", path)
    if longest is not None and longest <= 0:
        raise read.fail(f"{path}.maxShareDuration", "must be longer than 0s")
    grace = read.duration(governance, "reclaimGrace", path)
    return GovernanceSpec(
        idle_threshold_percent=threshold,
        idle_period=idle if idle is not None else DEFAULT_IDLE_GRACE,
        grace=grace if grace is not None else DEFAULT_RECLAIM_GRACE,
        max_share_duration=longest,
        exempt_classes=frozenset(
            read.strings(governance.get("exemptClasses"), f"{path}.exemptClasses")
        ),
    )


def _units(read: SpecReader, value: Any, path: str) -> int:
    number = read.number(value, path, 0.0, 1e9, open_low=False)
    return round(number * MILLI_UNITS)


def _queue(name: str, spec: Mapping[str, Any]) -> QueueSpec:
    read = SpecReader(f"GPUQueue {name}")
    namespaces = read.strings(spec.get("namespaces"), "spec.namespaces")
    if not namespaces:
        raise read.fail("spec.namespaces", "must list at least 1 namespace")
    quotas: list[QuotaSpec] = []
    raw_quotas = spec.get("quotas") or []
    if not isinstance(raw_quotas, list):
        raise read.fail("spec.quotas", "must be a list")
    for i, raw in enumerate(raw_quotas):
        entry = read.mapping(raw, f"spec.quotas[{i}]")
        pool = entry.get("pool")
        if not isinstance(pool, str) or not pool:
            raise read.fail(f"spec.quotas[{i}].pool", "required")
        if any(quota.pool == pool for quota in quotas):
            raise read.fail(f"spec.quotas[{i}]", f"duplicate pool {pool!r}")
        guaranteed = _units(read, entry.get("guaranteed", 0), f"spec.quotas[{i}].guaranteed")
        ceiling = None
        if entry.get("ceiling") is not None:
            ceiling = _units(read, entry["ceiling"], f"spec.quotas[{i}].ceiling")
            if ceiling < guaranteed:
                raise read.fail(f"spec.quotas[{i}].ceiling", "must be >= guaranteed")
        quotas.append(QuotaSpec(pool=pool, guaranteed=guaranteed, ceiling=ceiling))
    max_pods = spec.get("maxConcurrentPods")
    reclaimable = spec.get("reclaimable", True)
    if not isinstance(reclaimable, bool):
        raise read.fail("spec.reclaimable", "must be true or false")
    min_runtime = read.duration(spec, "minRuntimeBeforePreemption", "spec") or 0.0
    longest = read.duration(spec, "maxShareDuration", "spec")
    if longest is not None and longest <= 0:
        raise read.fail("spec.maxShareDuration", "must be longer than 0s")
    return QueueSpec(
        name=name,
        namespaces=frozenset(namespaces),
        priority=read.integer(spec.get("priority", 0), "spec.priority", 0, 1_000_000),
        weight=read.number(spec.get("weight", 1.0), "spec.weight", 0.0, 1000.0, open_low=True),
        quotas=tuple(quotas),
        max_concurrent_pods=(
            None if max_pods is None else read.integer(max_pods, "spec.maxConcurrentPods", 0)
        ),
        reclaimable=reclaimable,
        min_runtime_before_preemption=min_runtime,
        max_share_duration=longest,
        allowed_classes=frozenset(read.strings(spec.get("allowedClasses"), "spec.allowedClasses")),
    )


def parse_policy(documents: Sequence[Any]) -> PolicyConfig:
    """Build the pools and queues from ``GPUPool`` and ``GPUQueue`` documents.

    Raises:
        PolicyConfigError: A document or field is invalid; the message names which.
    """
    pools: dict[str, PoolSpec] = {}
    queues: dict[str, QueueSpec] = {}
    for index, document in enumerate(documents):
        if document is None:
            continue
        if not isinstance(document, Mapping):
            raise PolicyConfigError(f"document {index}: must be a mapping (a GPUPool or GPUQueue)")
        kind = document.get("kind")
        if kind not in ("GPUPool", "GPUQueue"):
            raise PolicyConfigError(f"document {index}: kind: must be GPUPool or GPUQueue")
        name = _metadata_name(document, index)
        spec = SpecReader(f"{kind} {name}").mapping(document.get("spec"), "spec")
        target: dict[str, Any] = pools if kind == "GPUPool" else queues
        if name in target:
            raise PolicyConfigError(f"{kind} {name}: metadata.name: defined twice")
        if kind == "GPUPool":
            if name == DEFAULT_POOL:
                raise PolicyConfigError(
                    f"GPUPool {name}: metadata.name: {DEFAULT_POOL!r} is the implicit pool of "
                    "nodes no pool selects; choose another name"
                )
            pools[name] = _pool(name, spec)
        else:
            queues[name] = _queue(name, spec)
    for queue in queues.values():
        for quota in queue.quotas:
            if quota.pool not in pools and quota.pool != DEFAULT_POOL:
                raise PolicyConfigError(
                    f"GPUQueue {queue.name}: spec.quotas: unknown pool {quota.pool!r}"
                )
    return PolicyConfig(pools=tuple(pools.values()), queues=tuple(queues.values()))


ObjectProblems = dict[tuple[str, str], str]
"""Per ``(kind, name)``, the parser's message (naming the field) for an object left out."""


def _named(kind: str, obj: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    name = name if isinstance(name, str) else ""
    return name, {"kind": kind, "metadata": {"name": name}, "spec": obj.get("spec")}


def _by_name(named: tuple[str, dict[str, Any]]) -> str:
    return named[0]


def parse_objects(
    pools: Iterable[Mapping[str, Any]], queues: Iterable[Mapping[str, Any]]
) -> tuple[PolicyConfig, ObjectProblems]:
    """The usable pools and queues among API objects, and why each unusable one was left out.

    Each object is parsed on its own (a queue against the usable pools), in name order, so one
    bad object (a quota naming a pool that does not exist yet, a pool called ``default``) never
    stops the others: every process that reads the objects leaves out exactly the same ones.

    Args:
        pools: GPUPool objects as JSON (``metadata.name`` and ``spec`` are read).
        queues: GPUQueue objects as JSON.
    """
    problems: ObjectProblems = {}
    pool_docs: list[dict[str, Any]] = []
    pool_specs: list[PoolSpec] = []
    for name, document in sorted((_named("GPUPool", obj) for obj in pools), key=_by_name):
        try:
            pool_specs.extend(parse_policy([document]).pools)
        except PolicyConfigError as error:
            problems[("GPUPool", name)] = str(error)
            continue
        pool_docs.append(document)
    queue_specs: list[QueueSpec] = []
    for name, document in sorted((_named("GPUQueue", obj) for obj in queues), key=_by_name):
        try:
            queue_specs.extend(parse_policy([*pool_docs, document]).queues)
        except PolicyConfigError as error:
            problems[("GPUQueue", name)] = str(error)
    return PolicyConfig(pools=tuple(pool_specs), queues=tuple(queue_specs)), problems
