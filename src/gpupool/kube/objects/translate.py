"""From API objects to the core's resource model, refusing what cannot be scheduled.

A pod's effective request follows Kubernetes exactly
(:func:`~gpupool.kube.objects.pod_requests.effective_requests`: containers,
native sidecars, init containers, pod-level requests, overhead). gpupool's own resources
(:mod:`gpupool.kube.objects.vocabulary`) become the core's GPU request; every other resource
kube-scheduler checks (other vendors' extended resources, hugepages, ephemeral storage) becomes
the core's extra resources, and the app containers' and sidecars' ``hostPort`` its host ports.
Every refusal names the field, e.g.
``spec.containers[0].resources.limits[gpupool.io/gpu-cores]: must be 1..100, got 150``.

A pod's node selector, required node affinity and tolerations, and a node's taints, readiness and
cordon, become the core's values too (:mod:`gpupool.core.constraints`; inter-pod affinity and
topology spread: :mod:`gpupool.kube.objects.translate_affinity`), so which node a pod may use
is decided by the core's one definition, in the live scheduler as in the simulator; a field
the core refuses is named by its path (``spec.tolerations[1].operator: ...``). Preferred node
affinity filters nothing and ranks nodes the GPU score leaves tied
(:mod:`gpupool.core.node_preference`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.core.constraints import (
    NodeConstraints,
    PreferredTerm,
    SelectorTerm,
    Taint,
    Toleration,
)
from gpupool.core.model import (
    MAX_AMOUNT,
    MILLI_PER_GPU,
    InvalidSpecError,
    NodeSpec,
    PodSpec,
)
from gpupool.kube.objects.constraint_records import NodeSelectorTerm, PreferredSchedulingTerm
from gpupool.kube.objects.contention_signal import contention_scores
from gpupool.kube.objects.handoff_refusals import decode as decode_refusals
from gpupool.kube.objects.object_error import InvalidObjectError as InvalidObjectError
from gpupool.kube.objects.object_error import at as _at
from gpupool.kube.objects.object_error import requirements as _requirements
from gpupool.kube.objects.pod_requests import (
    Convert,
    counts_as_extra,
    effective_requests,
    extra_resources,
    host_ports,
    parse_amount,
)
from gpupool.kube.objects.quantity import to_count, to_mib, to_milli, to_value
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.translate_affinity import pod_terms
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_ALLOWED_MODELS,
    ANNOTATION_GPU_LINKS,
    ANNOTATION_GPU_NUMA,
    ANNOTATION_GPU_UNHEALTHY,
    ANNOTATION_GPU_UUIDS,
    ANNOTATION_HANDOFF_REFUSED,
    LABEL_CLASS,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
    RESOURCE_GPU,
    RESOURCE_GPU_CORES,
    RESOURCE_GPU_MEMORY,
    RESOURCE_MIG_PREFIX,
)

UNKNOWN_MODEL = "unknown"
AFFINITY_PATH = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED_PATH = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"


def _refuse_inline_disks(owner: str, pod: PodRecord) -> None:
    """Refuse a volume gpupool cannot place as kube-scheduler would, naming its field."""
    for index, volume in enumerate(pod.spec.volumes):
        disk = volume.inline_disk()
        if disk:
            raise InvalidObjectError(
                owner,
                f"spec.volumes[{index}].{disk}",
                "inline in-tree disk volumes are not supported by gpupool's scheduler "
                "(no disk-conflict or attach-limit check); use a PersistentVolumeClaim",
            )


def _gpu_milli(gpus: int, cores: int, gpu_memory: int) -> int:
    """The compute share per GPU, in milli-GPUs, of a pod's validated GPU requests."""
    if not gpus:
        return 0
    if cores:
        return cores * MILLI_PER_GPU // 100
    # memory only: no compute share asked; nothing at all: whole GPUs
    return 0 if gpu_memory else MILLI_PER_GPU


def pod_spec(pod: PodRecord) -> PodSpec:
    """The core's view of ``pod``, named by its uid (names can be reused, uids cannot).

    Raises:
        InvalidObjectError: A gpupool resource has a value that cannot be scheduled.
    """
    owner = f"pod {pod.key}"
    _refuse_inline_disks(owner, pod)
    requests = effective_requests(pod)

    def effective(name: str) -> tuple[int, str]:
        return requests.get(name, (0, ""))

    cpu, _ = effective("cpu")
    memory, _ = effective("memory")
    gpus, _ = effective(RESOURCE_GPU)
    gpu_memory, memory_path = effective(RESOURCE_GPU_MEMORY)
    cores, cores_path = effective(RESOURCE_GPU_CORES)

    mig_profiles = sorted(name for name in requests if name.startswith(RESOURCE_MIG_PREFIX))
    mig_profile = ""
    if mig_profiles:
        if len(mig_profiles) > 1 or gpus or gpu_memory or cores:
            raise InvalidObjectError(
                owner,
                "spec.containers[].resources",
                f"a MIG slice ({', '.join(mig_profiles)}) excludes other GPU requests",
            )
        count, mig_path = effective(mig_profiles[0])
        if count != 1:
            raise InvalidObjectError(owner, mig_path, f"must be 1 (one MIG slice), got {count}")
        mig_profile = mig_profiles[0].removeprefix(RESOURCE_MIG_PREFIX)

    if (gpu_memory or cores) and not gpus:
        path = memory_path or cores_path
        raise InvalidObjectError(owner, path, f"a GPU share needs {RESOURCE_GPU} >= 1")
    if cores_path and not 1 <= cores <= 100:
        raise InvalidObjectError(owner, cores_path, f"must be 1..100 (percent), got {cores}")

    models = pod.metadata.annotations.get(ANNOTATION_ALLOWED_MODELS, "")
    try:
        return PodSpec(
            name=pod.metadata.uid,
            cpu_milli=cpu,
            memory_mib=memory,
            gpu_count=gpus,
            gpu_milli=_gpu_milli(gpus, cores, gpu_memory),
            gpu_memory_mib=gpu_memory,
            gpu_models=frozenset(m.strip() for m in models.split("|") if m.strip()),
            mig_profile=mig_profile,
            workload_class=pod.metadata.labels.get(LABEL_CLASS, ""),
            constraints=node_constraints(pod),
            extra_resources=extra_resources(owner, requests),
            host_ports=host_ports(pod),
            namespace=pod.metadata.namespace,
            labels=tuple(sorted(pod.metadata.labels.items())),
            terms=pod_terms(pod),
        )
    except InvalidSpecError as error:
        raise InvalidObjectError(owner, error.field_name, str(error)) from None


def node_spec(node: NodeRecord) -> NodeSpec:
    """The core's view of ``node`` from its allocatable resources and gpupool labels.

    Raises:
        InvalidObjectError: An allocatable amount or a gpupool label cannot be read.
    """
    owner = f"node {node.key}"
    allocatable = node.status.allocatable

    def read(name: str, convert: Convert, default: str = "0") -> int:
        return parse_amount(
            owner, allocatable.get(name, default), f"status.allocatable[{name}]", convert
        )

    gpus, unhealthy = _gpus(node, read(RESOURCE_GPU, to_count))
    labels = node.metadata.labels
    memory_label = labels.get(LABEL_GPU_MEMORY, "0")
    if not memory_label.isdigit():
        raise InvalidObjectError(
            owner,
            f"metadata.labels[{LABEL_GPU_MEMORY}]",
            f"must be MiB digits, got {memory_label!r}",
        )
    mig = tuple(
        (name.removeprefix(RESOURCE_MIG_PREFIX), read(name, to_count))
        for name in sorted(allocatable)
        if name.startswith(RESOURCE_MIG_PREFIX)
    )
    extras = tuple(
        (name, read(name, to_value)) for name in sorted(allocatable) if counts_as_extra(name)
    )
    if any(amount > MAX_AMOUNT for _, amount in extras):
        name = next(name for name, amount in extras if amount > MAX_AMOUNT)
        raise InvalidObjectError(
            owner, f"status.allocatable[{name}]", f"must be at most {MAX_AMOUNT}"
        )
    return NodeSpec(
        name=node.key,
        cpu_milli=read("cpu", to_milli),
        memory_mib=read("memory", to_mib),
        gpu_count=gpus,
        gpu_model=labels.get(LABEL_GPU_MODEL, UNKNOWN_MODEL) if gpus else "",
        gpu_memory_mib=int(memory_label),
        max_pods=read("pods", to_count, "110"),
        mig_slices=mig,
        labels=tuple(sorted(labels.items())),
        taints=node_taints(node),
        ready=node.ready,
        unschedulable=node.spec.unschedulable,
        unhealthy_gpus=unhealthy,
        refused_kinds=decode_refusals(
            owner, node.metadata.annotations.get(ANNOTATION_HANDOFF_REFUSED)
        ),
        extra_resources=extras,
        gpu_links=per_gpu(node, ANNOTATION_GPU_LINKS, gpus),
        gpu_numa=per_gpu(node, ANNOTATION_GPU_NUMA, gpus),
        gpu_contention=contention_scores(node.metadata.annotations, node.key, gpus),
    )


def _gpus(node: NodeRecord, devices: int) -> tuple[int, tuple[int, ...]]:
    """The node's GPU count and the indexes of its unhealthy GPUs.

    The node agent advertises maxPodsPerGPU devices per GPU (so a kubelet admits every share),
    healthy ones only, so allocatable counts devices; the GPUs are the UUIDs it lists, no more
    than its devices while all are healthy (none while unregistered). A GPU it lists in
    ``gpupool.io/gpu-unhealthy`` keeps its index, so the pods on it and on the GPUs after it
    keep the GPUs their records name: counting from allocatable would drop the last index when
    one GPU of an Exclusive pool (one device per GPU) breaks, and place pods on the broken one.
    Only UUIDs the node lists count; the annotation is the node agent's, so a node can only
    take its own GPUs out of service.
    """
    annotations = node.metadata.annotations
    listed = [uuid.strip() for uuid in annotations.get(ANNOTATION_GPU_UUIDS, "").split(",")]
    if not any(listed):
        return devices, ()
    broken = {uuid.strip() for uuid in annotations.get(ANNOTATION_GPU_UNHEALTHY, "").split(",")}
    unhealthy = tuple(i for i, uuid in enumerate(listed) if uuid and uuid in broken)
    if not unhealthy or (devices == 0 and len(unhealthy) < len(listed)):
        return min(devices, len(listed)), ()
    return len(listed), unhealthy


def per_gpu(node: NodeRecord, annotation: str, count: int) -> tuple[int, ...]:
    """Each GPU's NVLink domain or NUMA node, from the agent's ``annotation``.

    None (one domain) when it lists another number of GPUs than the node has, or is not a list
    of integers: the annotation is the agent's, and a node is better placed without it.
    """
    listed = node.metadata.annotations.get(annotation, "")
    try:
        domains = tuple(int(value) for value in listed.split(",")) if listed else ()
    except ValueError:
        return ()
    return domains if len(domains) == count else ()


def gpu_uuids(node: NodeRecord, count: int) -> tuple[str, ...]:
    """The node's GPU UUIDs in index order; empty strings where the inventory gave none."""
    listed = node.metadata.annotations.get(ANNOTATION_GPU_UUIDS, "").split(",")
    return tuple(listed[i].strip() if i < len(listed) else "" for i in range(count))


def _term(owner: str, path: str, term: NodeSelectorTerm) -> SelectorTerm:
    expressions = _requirements(owner, f"{path}.matchExpressions", term.match_expressions)
    fields = _requirements(owner, f"{path}.matchFields", term.match_fields)
    try:
        return SelectorTerm(expressions, fields)
    except InvalidSpecError as error:
        raise _at(owner, path, error) from None


def _tolerations(owner: str, pod: PodRecord) -> tuple[Toleration, ...]:
    found = []
    for i, item in enumerate(pod.spec.tolerations):
        try:  # an empty operator means Equal, as in Kubernetes
            found.append(Toleration(item.key, item.operator or "Equal", item.value, item.effect))
        except InvalidSpecError as error:
            raise _at(owner, f"spec.tolerations[{i}]", error) from None
    return tuple(found)


def node_constraints(pod: PodRecord) -> NodeConstraints | None:
    """The pod's node selector, node affinity and tolerations (None: it names none).

    Raises:
        InvalidObjectError: A requirement, preferred term or toleration the core refuses, named
            by its path.
    """
    owner, spec = f"pod {pod.key}", pod.spec
    node_affinity = spec.affinity.node_affinity
    required = (
        node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    )
    preferred = (
        node_affinity.preferred_during_scheduling_ignored_during_execution if node_affinity else ()
    )
    if not spec.node_selector and required is None and not spec.tolerations and not preferred:
        return None
    terms = None
    if required is not None:
        terms = tuple(
            _term(owner, f"{AFFINITY_PATH}.nodeSelectorTerms[{i}]", term)
            for i, term in enumerate(required.node_selector_terms)
        )
    return NodeConstraints.of(
        spec.node_selector,
        terms,
        _tolerations(owner, pod),
        preferred=_preferred(owner, preferred),
    )


def _preferred(owner: str, items: Sequence[PreferredSchedulingTerm]) -> tuple[PreferredTerm, ...]:
    found = []
    for i, item in enumerate(items):
        path = f"{PREFERRED_PATH}[{i}]"
        term = _term(owner, f"{path}.preference", item.preference)
        try:
            found.append(PreferredTerm(item.weight, term))
        except InvalidSpecError as error:
            raise _at(owner, path, error) from None
    return tuple(found)


def node_taints(node: NodeRecord) -> tuple[Taint, ...]:
    """The node's taints as core values.

    Raises:
        InvalidObjectError: A taint the core refuses (no key, an unknown effect).
    """
    owner, found = f"node {node.key}", []
    for i, item in enumerate(node.spec.taints):
        try:
            found.append(Taint(item.key, item.value, item.effect))
        except InvalidSpecError as error:
            raise _at(owner, f"spec.taints[{i}]", error) from None
    return tuple(found)
