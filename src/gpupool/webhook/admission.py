"""The admission decision for one pod: refuse it, or admit it with a list of patches.

A pure function of the pod, the cluster facts and the webhook's settings, so the same decision
is unit tested, fuzzed and served. The request's meaning comes from the scheduler's own
translation (:func:`gpupool.kube.objects.translate.pod_spec`): the webhook and the scheduler cannot
disagree on what a pod asks for. The webhook adds what only it can check (the cluster's GPU
models, sizes and MIG profiles, the namespace's queues) and routes the pod to gpupool.

Nothing a tenant writes is trusted: a queue label naming a queue that does not serve the pod's
namespace is refused, so is a class label a queue serving the namespace does not allow
(``spec.allowedClasses``; the same refusal, word for word, as the ValidatingAdmissionPolicy
``gpupool-queue-classes``, which holds while the webhook is down), and so is any pod that
arrives carrying (or changing) the allocation annotation, which only the scheduler writes, in
the Binding. The webhook never writes that annotation itself. Its patches touch three fields
only: ``spec.schedulerName`` and the ``gpupool.io/queue`` and ``gpupool.io/class`` labels (the
default class only where every serving queue allows it).

Before the cluster facts are known (the caches have not synced), only the checks that need no
facts run; a Deployment keeps such a replica out of its Service through the readiness probe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from gpupool.kube.objects.records import ObjectMeta, PodRecord
from gpupool.kube.objects.translate import InvalidObjectError, pod_spec
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_ALLOCATION,
    ANNOTATION_ALLOWED_MODELS,
    LABEL_CLASS,
    LABEL_QUEUE,
    RESOURCE_GPU,
    RESOURCE_GPU_MEMORY,
    SCHEDULER_NAME,
)
from gpupool.policy.membership import pod_queue, queues_serving
from gpupool.webhook.facts import ClusterFacts
from gpupool.webhook.refusal import Refusal
from gpupool.webhook.resources import asks_for_gpupool, check_resources

DEFAULT_SCHEDULERS = ("", "default-scheduler")
"""Scheduler names that mean "not chosen" (the API server defaults an unset one)."""
WHOLE_REQUEST = "spec.containers[].resources"
CLASS_FIELD = f"metadata.labels[{LABEL_CLASS}]"
PatchOp = dict[str, Any]


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """The webhook's settings.

    Attributes:
        scheduler_name: What ``spec.schedulerName`` is set to (gpupool's scheduler).
        default_class: The ``gpupool.io/class`` label given to pods without one ("" = none).
        check_nodes: Whether to refuse models, MIG profiles and sizes no node has. Turn it off
            where an autoscaler adds GPU nodes on demand (a pod may wait for a model not yet
            present).
    """

    scheduler_name: str = SCHEDULER_NAME
    default_class: str = "default"
    check_nodes: bool = True


DEFAULT_CONFIG = AdmissionConfig()


@dataclass(frozen=True, slots=True)
class PodReview:
    """What the API server asks about one pod.

    Attributes:
        operation: ``CREATE`` or ``UPDATE`` (other operations are admitted unchanged).
        namespace: The request's namespace (the object's may be empty on create).
        uid: The request's uid, standing in for the pod's uid before it has one.
        pod: The pod as JSON.
        old_pod: The pod before an update.
        claims_gpupool_devices: Whether the pod's DRA claims ask for gpupool's devices (read
            from the API server by :mod:`gpupool.webhook.claim_requests`, which keeps this
            function pure): such a pod is routed and checked like one asking for
            ``gpupool.io/gpu``.
    """

    operation: str
    namespace: str
    uid: str
    pod: Mapping[str, Any]
    old_pod: Mapping[str, Any] | None = None
    claims_gpupool_devices: bool = False


@dataclass(frozen=True, slots=True)
class Mutation:
    """The JSONPatch operations that set one field (named if validation finds it unset)."""

    field: str
    value: str
    ops: tuple[PatchOp, ...]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Admit (with ``mutations``, possibly none) or refuse."""

    refusal: Refusal | None = None
    mutations: tuple[Mutation, ...] = ()

    @property
    def allowed(self) -> bool:
        """Whether the pod is admitted."""
        return self.refusal is None

    @property
    def patch(self) -> list[PatchOp]:
        """The JSONPatch operations to apply."""
        return [op for mutation in self.mutations for op in mutation.ops]


def _refuse(field: str, message: str) -> Verdict:
    return Verdict(Refusal(field, message))


def _decode(pod: Mapping[str, Any]) -> PodRecord | Refusal:
    try:
        return msgspec.convert(pod, PodRecord)
    except msgspec.ValidationError as error:
        text = str(error)
        where = text.rpartition(" - at `$")[2].rstrip("`").lstrip(".") if "- at `$" in text else ""
        return Refusal(where or "metadata", text.partition(" - at `")[0])


def _mapping_at(obj: Mapping[str, Any] | None, *keys: str) -> Mapping[str, Any]:
    """``obj[k1][k2]...``, or an empty mapping where any step is missing or not an object."""
    current: Any = obj
    for key in keys:
        current = current.get(key) if isinstance(current, Mapping) else None
    return current if isinstance(current, Mapping) else {}


def _label_path(key: str) -> str:
    return "/metadata/labels/" + key.replace("~", "~0").replace("/", "~1")


def _set_labels(pod: Mapping[str, Any], labels: dict[str, str]) -> list[Mutation]:
    """Mutations adding ``labels``; the first also creates the map when the pod has none."""
    mutations = [
        Mutation(
            f"metadata.labels[{key}]",
            value,
            ({"op": "add", "path": _label_path(key), "value": value},),
        )
        for key, value in labels.items()
    ]
    if mutations and not _mapping_at(pod, "metadata", "labels"):
        create = {"op": "add", "path": "/metadata/labels", "value": {}}
        first = mutations[0]
        mutations[0] = Mutation(first.field, first.value, (create, *first.ops))
    return mutations


def _queue(
    namespace: str, labels: Mapping[str, str], facts: ClusterFacts
) -> tuple[str | None, Refusal | None]:
    """The pod's queue (None: no queue serves the namespace) or why its queue label is refused.

    The queue is :func:`gpupool.policy.membership.pod_queue`, the scheduler's rule; the webhook
    is stricter only in what it refuses: a label naming a queue that does not serve the
    namespace (the scheduler would ignore it), and no label where several queues serve the
    namespace (the scheduler would take the first by name; the tenant should choose).
    """
    field = f"metadata.labels[{LABEL_QUEUE}]"
    serving = facts.queues_serving(namespace)
    chosen = labels.get(LABEL_QUEUE)
    allowed = ", ".join(serving) if serving else "none (no GPUQueue lists this namespace)"
    if chosen is not None and chosen not in serving:
        return None, Refusal(
            field,
            f"queue {chosen!r} does not serve namespace {namespace!r}; allowed: {allowed}",
        )
    if chosen is None and len(serving) > 1:
        return None, Refusal(
            field, f"namespace {namespace!r} is served by several queues; choose one of {allowed}"
        )
    if not serving:
        return None, None
    queue = pod_queue(facts.queues.values(), namespace, chosen or "")
    if facts.queues[queue].max_concurrent_pods == 0:
        return None, Refusal(field, f"queue {queue!r} admits no pods (maxConcurrentPods is 0)")
    return queue, None


def class_refusal_message(workload_class: str, queue: str, namespace: str) -> str:
    """Why a class is refused; the admission policy's ``messageExpression`` says the same."""
    return (
        f"{CLASS_FIELD}: class '{workload_class}' is not in spec.allowedClasses of "
        f"GPUQueue '{queue}', which serves namespace '{namespace}'"
    )


def _class_refusal(workload_class: str, facts: ClusterFacts, namespace: str) -> Refusal | None:
    """A class some queue serving the namespace does not allow (``spec.allowedClasses``).

    Every serving queue must allow it, not only the pod's own queue: the admission policy sees
    one GPUQueue at a time and so cannot tell which queue a label chooses; the webhook refuses
    exactly what the policy refuses, so neither ever admits what the other would refuse.
    """
    for queue in queues_serving(facts.queues.values(), namespace):
        if not queue.allows_class(workload_class):
            message = class_refusal_message(workload_class, queue.name, namespace)
            return Refusal(CLASS_FIELD, message.removeprefix(f"{CLASS_FIELD}: "))
    return None


def _cluster_checks(
    record: PodRecord, gpu_count: int, memory: int, facts: ClusterFacts
) -> Refusal | None:
    """Checks of the whole request against the nodes (single values are checked already)."""
    if not facts.has_gpu_nodes:
        return None
    if gpu_count > facts.most_gpus_per_node:
        return Refusal(
            f"{WHOLE_REQUEST}[{RESOURCE_GPU}]",
            f"the containers ask for {gpu_count} GPUs in all; allowed: 0.."
            f"{facts.most_gpus_per_node} (the most GPUs on one node)",
        )
    largest = facts.largest_gpu_memory_mib
    if largest and memory > largest:
        return Refusal(
            f"{WHOLE_REQUEST}[{RESOURCE_GPU_MEMORY}]",
            f"the containers ask for {memory} MiB per GPU in all; allowed: 1..{largest} "
            "(the largest GPU in the cluster)",
        )
    wanted = record.metadata.annotations.get(ANNOTATION_ALLOWED_MODELS, "")
    unknown = sorted({m.strip() for m in wanted.split("|") if m.strip()} - facts.models)
    if unknown:
        return Refusal(
            f"metadata.annotations[{ANNOTATION_ALLOWED_MODELS}]",
            f"unknown GPU model(s) {', '.join(unknown)}; the nodes have: "
            f"{', '.join(sorted(facts.models)) or 'none'} (separate models with '|')",
        )
    return None


def _allocation_forged(review: PodReview, record: PodRecord) -> bool:
    new = record.metadata.annotations.get(ANNOTATION_ALLOCATION)
    if review.operation == "CREATE" or review.old_pod is None:
        return new is not None
    old = _mapping_at(review.old_pod, "metadata", "annotations").get(ANNOTATION_ALLOCATION)
    return new != old


def _mentions_gpupool(pod: Mapping[str, Any]) -> bool:
    return "gpupool" in json.dumps(pod, default=str)


def review_pod(
    review: PodReview, facts: ClusterFacts | None, config: AdmissionConfig = DEFAULT_CONFIG
) -> Verdict:
    """Decide on one pod: refuse it, naming the field, or admit it with its mutations.

    Args:
        review: The pod and the request's operation and namespace.
        facts: The cluster facts; None before the caches have synced (only the checks that
            need no facts run then).
        config: The webhook's settings.
    """
    if review.operation not in ("CREATE", "UPDATE"):
        return Verdict()
    decoded = _decode(review.pod)
    if isinstance(decoded, Refusal):
        # the API server never sends an ill-typed pod; refuse only what concerns gpupool
        return Verdict(decoded) if _mentions_gpupool(review.pod) else Verdict()
    meta = decoded.metadata
    if _allocation_forged(review, decoded):
        return _refuse(
            f"metadata.annotations[{ANNOTATION_ALLOCATION}]",
            "is written by the gpupool scheduler only, when it binds the pod",
        )
    if review.operation == "UPDATE":
        return _review_update(review, meta, facts)
    scheduler = decoded.spec.scheduler_name
    gpupools = asks_for_gpupool(decoded) or review.claims_gpupool_devices
    if not gpupools and scheduler != config.scheduler_name:
        return Verdict()
    refusal = check_resources(decoded, facts)
    if refusal is not None:
        return Verdict(refusal)
    with_uid = msgspec.structs.replace(
        decoded,
        metadata=msgspec.structs.replace(meta, uid=meta.uid or review.uid or "admission"),
    )
    try:
        spec = pod_spec(with_uid)
    except InvalidObjectError as error:
        field = error.field
        if not field.startswith(("spec.", "metadata.")):
            field = WHOLE_REQUEST  # a core field name: the request as a whole
        return _refuse(field, error.message)
    node_facts = facts if config.check_nodes else None
    if node_facts is not None:
        refusal = _cluster_checks(decoded, spec.gpu_count, spec.gpu_memory_mib, node_facts)
        if refusal is not None:
            return Verdict(refusal)
    return _route(review, meta, scheduler, facts, config)


def bound_label_message(label: str) -> str:
    """Why a bound pod's queue or class label may not change (the admission policy's words)."""
    why = {
        LABEL_QUEUE: "its signed allocation record charges it to the queue it was admitted under",
        LABEL_CLASS: "it decided the pool and the exemptions the pod was admitted under",
    }[label]
    return f"fixed once the pod is bound ({why}); create a new pod instead"


def _review_update(review: PodReview, meta: ObjectMeta, facts: ClusterFacts | None) -> Verdict:
    """An update may not move a pod to a queue not serving its namespace, nor relabel a bound pod.

    A bound pod's queue and class labels may not change at all.
    Nothing else is judged again: the resources cannot change in an update, and refusing an
    unrelated update (a finalizer removed) because the cluster changed since the pod was
    created would only block its deletion. The scheduler charges a bound pod to the queue of
    its signed record whatever its label says; refusing the change keeps the label honest
    (``gpupool-declared-runtime`` refuses it too, with the webhook down).
    """
    old_labels = _mapping_at(review.old_pod, "metadata", "labels")
    if _mapping_at(review.old_pod, "spec").get("nodeName"):
        for label in (LABEL_QUEUE, LABEL_CLASS):
            if meta.labels.get(label) != old_labels.get(label):
                return _refuse(f"metadata.labels[{label}]", bound_label_message(label))
    new_queue = meta.labels.get(LABEL_QUEUE)
    queue_moved = new_queue is not None and new_queue != old_labels.get(LABEL_QUEUE)
    class_moved = meta.labels.get(LABEL_CLASS, "") != old_labels.get(LABEL_CLASS, "")
    if facts is None or not (queue_moved or class_moved):
        return Verdict()
    _, refusal = _queue(review.namespace, meta.labels, facts) if queue_moved else (None, None)
    if refusal is None and class_moved:
        refusal = _class_refusal(meta.labels.get(LABEL_CLASS, ""), facts, review.namespace)
    return Verdict(refusal)


def _route(
    review: PodReview,
    meta: ObjectMeta,
    scheduler: str,
    facts: ClusterFacts | None,
    config: AdmissionConfig,
) -> Verdict:
    """Check the queue label and add the routing fields gpupool needs."""
    mutations: list[Mutation] = []
    labels: dict[str, str] = {}
    if facts is not None:
        queue, refusal = _queue(review.namespace, meta.labels, facts)
        if refusal is None:
            refusal = _class_refusal(meta.labels.get(LABEL_CLASS, ""), facts, review.namespace)
        if refusal is not None:
            return Verdict(refusal)
        if queue is not None and LABEL_QUEUE not in meta.labels:
            labels[LABEL_QUEUE] = queue
    if scheduler not in (*DEFAULT_SCHEDULERS, config.scheduler_name):
        return _refuse(
            "spec.schedulerName",
            f"a pod asking for gpupool resources is scheduled by {config.scheduler_name!r} "
            f"(leave it unset), got {scheduler!r}",
        )
    if scheduler != config.scheduler_name:
        op = {"op": "add", "path": "/spec/schedulerName", "value": config.scheduler_name}
        mutations.append(Mutation("spec.schedulerName", config.scheduler_name, (op,)))
    default_class = config.default_class
    # only a class every serving queue allows: the admission policy would refuse another
    allowed = facts is None or _class_refusal(default_class, facts, review.namespace) is None
    if default_class and LABEL_CLASS not in meta.labels and allowed:
        labels[LABEL_CLASS] = default_class
    mutations.extend(_set_labels(review.pod, labels))
    return Verdict(mutations=tuple(mutations))


def validate_only(verdict: Verdict) -> Verdict:
    """The verdict of the validating webhook: a mutation still needed is a refusal.

    The validating webhook sees the pod after every mutating webhook ran; a field gpupool's
    mutation should have set but did not (it was bypassed, or a later webhook undid it) is
    refused, naming that field.
    """
    if verdict.refusal is not None or not verdict.mutations:
        return verdict
    first = verdict.mutations[0]
    return _refuse(
        first.field,
        f"must be {first.value!r} (set by gpupool's mutating webhook, which this pod bypassed)",
    )
