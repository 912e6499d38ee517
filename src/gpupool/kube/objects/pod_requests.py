"""A pod's effective request as Kubernetes computes it, and the host ports it binds.

kube-scheduler's NodeResourcesFit and the kubelet's admission both judge a pod by ``PodRequests``
(containers, native sidecars, init containers, pod-level requests, overhead) and NodePorts by the
ports its long-running containers bind: gpupool must count the same, or it binds pods the
kubelet refuses and places pods where kube-scheduler would not. Every amount is read here, once,
and every refusal names its path (:func:`gpupool.kube.objects.translate.pod_spec` builds the
core's request from what this returns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpupool.core.model import MAX_AMOUNT, ExtraResources, HostPort, InvalidSpecError
from gpupool.kube.objects.object_error import InvalidObjectError
from gpupool.kube.objects.quantity import QuantityError, to_count, to_mib, to_milli, to_value
from gpupool.kube.objects.records import Container, PodRecord
from gpupool.kube.objects.vocabulary import RESOURCE_PREFIX

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


def parse_amount(owner: str, amount: str, path: str, convert: Convert) -> int:
    """One amount in ``convert``'s unit; a bad or negative one is refused naming ``path``."""
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
            total = parse_amount(owner, pod_level[name], path, convert)
        if name in pod.spec.overhead:
            total += parse_amount(owner, pod.spec.overhead[name], f"spec.overhead[{name}]", convert)
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
            total += parse_amount(owner, amount, path, convert)
    sidecars, peak, peak_path = 0, 0, ""
    for requests, sidecar in inits:
        value, init_path = 0, ""
        if name in requests:
            amount, init_path = requests[name]
            value = parse_amount(owner, amount, init_path, convert)
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


def extra_resources(owner: str, amounts: Effective) -> ExtraResources:
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
