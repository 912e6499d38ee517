"""From API objects to the core's resource model, refusing what cannot be scheduled.

A pod's effective request follows Kubernetes exactly (:func:`effective_requests`: containers,
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

from collections.abc import Callable, Iterable, Sequence

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
    ExtraResources,
    HostPort,
    InvalidSpecError,
    NodeSpec,
    PodSpec,
)
from gpupool.kube.objects.object_error import InvalidObjectError as InvalidObjectError
from gpupool.kube.objects.object_error import at as _at
from gpupool.kube.objects.object_error import requirements as _requirements
from gpupool.kube.objects.quantity import QuantityError, to_count, to_mib, to_milli, to_value
from gpupool.kube.objects.records import (
    Container,
    NodeRecord,
    NodeSelectorTerm,
    PodRecord,
    PreferredSchedulingTerm,
)
from gpupool.kube.objects.translate_affinity import pod_terms
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_ALLOWED_MODELS,
    ANNOTATION_GPU_UNHEALTHY,
    ANNOTATION_GPU_UUIDS,
    LABEL_CLASS,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
    RESOURCE_GPU,
    RESOURCE_GPU_CORES,
    RESOURCE_GPU_MEMORY,
    RESOURCE_MIG_PREFIX,
    RESOURCE_PREFIX,
)

UNKNOWN_MODEL = "unknown"
AFFINITY_PATH = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED_PATH = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"


Convert = Callable[[str], int]
Requests = dict[str, tuple[str, str]]
"""Resource name to (amount, the field path it came from)."""
Effective = dict[str, tuple[int, str]]
"""Resource name to (the pod's effective request, the field path that decided it)."""

POD_LEVEL = ("cpu", "memory")
POD_LEVEL_PREFIX = "hugepages-"
"""Resources whose pod-level request (``spec.resources``, PodLevelResources) replaces the
containers' (kube's supported pod-level resources)."""
NOT_EXTRA = ("cpu", "memory", "pods")


def counts_as_extra(name: str) -> bool:
    """Whether kube-scheduler's NodeResourcesFit checks ``name`` and gpupool has no field for it.

    It checks ``ephemeral-storage`` and every *scalar* resource: names with a ``/`` (other
    vendors' extended resources, ``kubernetes.io/`` prefixed ones), ``hugepages-*`` and
    ``attachable-volumes-*``; a name that is none of these it ignores, and so do we. CPU,
    memory, pods and gpupool's own resources have fields of their own.
    """
    if name in NOT_EXTRA or name.startswith(RESOURCE_PREFIX):
        return False
    return (
        name == "ephemeral-storage"
        or "/" in name
        or name.startswith(("hugepages-", "attachable-volumes-"))
    )


def _converter(name: str) -> Convert:
    """The unit a resource is counted in: milli-CPU, MiB, devices, or kube's ``Value()``."""
    if name == "cpu":
        return to_milli
    if name == "memory":
        return to_mib
    if name.startswith(RESOURCE_PREFIX):
        return to_count
    return to_value


def _container_requests(containers: Iterable[Container], kind: str) -> list[Requests]:
    result = []
    for index, container in enumerate(containers):
        merged: Requests = {}
        for source in ("limits", "requests"):
            values = getattr(container.resources, source)
            for name, amount in values.items():
                merged[name] = (amount, f"spec.{kind}[{index}].resources.{source}[{name}]")
        result.append(merged)
    return result


def _parse(owner: str, amount: str, path: str, convert: Convert) -> int:
    try:
        value = convert(amount)
    except QuantityError as error:
        raise InvalidObjectError(owner, path, str(error)) from None
    if value < 0:
        raise InvalidObjectError(owner, path, f"must be >= 0, got {amount}")
    return value


def effective_requests(pod: PodRecord) -> Effective:
    """Every resource the pod names, at its effective request as Kubernetes computes it.

    That is kube's ``PodRequests`` (what kube-scheduler's NodeResourcesFit and the kubelet's
    admission both use): the app containers' sum plus every native sidecar (an init container
    with ``restartPolicy: Always``, which keeps running beside them); each init container, in
    order, needs its own request plus the sidecars started before it (a sidecar: all sidecars
    up to and including itself); the pod needs the larger of the two. A pod-level request
    (``spec.resources.requests``) of cpu, memory or hugepages replaces the containers' figure,
    and the overhead (``spec.overhead``, set by RuntimeClass admission) is added last. A
    container's limit counts as its request when it gives none (the API server defaults it so).

    gpupool's own resources (``gpupool.io/*``) are counted by the same rule, which changes
    only what a sidecar asking for them holds: before, it counted like an init container
    (taken at most, never beside the app containers). A sidecar runs beside them, the device
    plugin gives it devices of its own, and the kubelet admits the pod against this same sum,
    so counting less would let the scheduler bind pods the kubelet then refuses.

    Raises:
        InvalidObjectError: An amount cannot be read, named by its path.
    """
    owner = f"pod {pod.key}"
    containers = _container_requests(pod.spec.containers, "containers")
    inits = list(
        zip(
            _container_requests(pod.spec.init_containers, "initContainers"),
            [container.sidecar for container in pod.spec.init_containers],
            strict=True,
        )
    )
    pod_level = pod.spec.resources.requests if pod.spec.resources is not None else {}
    names = {name for requests in containers for name in requests}
    names.update(name for requests, _ in inits for name in requests)
    names.update(pod.spec.overhead)
    names.update(pod_level)
    result: Effective = {}
    for name in sorted(names):
        convert = _converter(name)
        total, path = _sum_with_sidecars(owner, name, convert, containers, inits)
        if name in pod_level and (name in POD_LEVEL or name.startswith(POD_LEVEL_PREFIX)):
            path = f"spec.resources.requests[{name}]"
            total = _parse(owner, pod_level[name], path, convert)
        if name in pod.spec.overhead:
            total += _parse(owner, pod.spec.overhead[name], f"spec.overhead[{name}]", convert)
        result[name] = (total, path)
    return result


def _sum_with_sidecars(
    owner: str,
    name: str,
    convert: Convert,
    containers: list[Requests],
    inits: list[tuple[Requests, bool]],
) -> tuple[int, str]:
    """One resource's container figure (:func:`effective_requests`) and the path deciding it."""
    total, path = 0, ""
    for requests in containers:
        if name in requests:
            amount, path = requests[name]
            total += _parse(owner, amount, path, convert)
    sidecars, peak, peak_path = 0, 0, ""
    for requests, sidecar in inits:
        value, init_path = 0, ""
        if name in requests:
            amount, init_path = requests[name]
            value = _parse(owner, amount, init_path, convert)
        if sidecar:
            sidecars += value
            total += value
            path = init_path or path
            running = sidecars
        else:
            running = value + sidecars
        if running > peak:
            peak, peak_path = running, init_path or peak_path
    if peak > total:
        return peak, peak_path
    return total, path


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
            extra_resources=_extras(owner, requests),
            host_ports=host_ports(pod),
            namespace=pod.metadata.namespace,
            labels=tuple(sorted(pod.metadata.labels.items())),
            terms=pod_terms(pod),
        )
    except InvalidSpecError as error:
        raise InvalidObjectError(owner, error.field_name, str(error)) from None


def _extras(owner: str, amounts: Effective) -> ExtraResources:
    """The :func:`counts_as_extra` resources of ``amounts``, refusing one the core cannot hold."""
    extras = []
    for name, (amount, path) in amounts.items():
        if counts_as_extra(name) and amount:
            if amount > MAX_AMOUNT:
                raise InvalidObjectError(owner, path, f"must be at most {MAX_AMOUNT}")
            extras.append((name, amount))
    return tuple(extras)


_PORT_FIELDS = {"port": "hostPort", "protocol": "protocol"}


def host_ports(pod: PodRecord) -> tuple[HostPort, ...]:
    """The host ports the pod binds: its app containers' and its sidecars' (kube's NodePorts).

    A plain init container's ports are not held (it has ended before the app starts), and a
    port without a ``hostPort`` binds nothing on the node.

    Raises:
        InvalidObjectError: A host port or protocol out of range, named by its path.
    """
    found = []
    for kind, containers in (
        ("initContainers", pod.spec.init_containers),
        ("containers", pod.spec.containers),
    ):
        for i, container in enumerate(containers):
            if kind == "initContainers" and not container.sidecar:
                continue
            for j, port in enumerate(container.ports):
                if port.host_port <= 0:
                    continue
                try:
                    found.append(HostPort(port.host_port, port.protocol, port.host_ip))
                except InvalidSpecError as error:
                    path = f"spec.{kind}[{i}].ports[{j}].{_PORT_FIELDS[error.field_name]}"
                    raise InvalidObjectError(f"pod {pod.key}", path, str(error)) from None
    return tuple(found)


def node_spec(node: NodeRecord) -> NodeSpec:
    """The core's view of ``node`` from its allocatable resources and gpupool labels.

    Raises:
        InvalidObjectError: An allocatable amount or a gpupool label cannot be read.
    """
    owner = f"node {node.key}"
    allocatable = node.status.allocatable

    def read(name: str, convert: Convert, default: str = "0") -> int:
        return _parse(owner, allocatable.get(name, default), f"status.allocatable[{name}]", convert)

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
        extra_resources=extras,
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
