"""Which pool a node is in, which queue a pod is charged to, how many pods a GPU may hold.

Four processes answer these questions about the same GPUPool and GPUQueue objects: the scheduler
(placement, quotas, status), the node agent (how many devices it advertises per GPU), governance
(a pod's reclaim limits, the cost ledger's queue and pool) and the admission webhook (the queue
label it checks and sets). When each had its own rules they disagreed: a node two pools select
was in neither for the scheduler and in the first by name for the agent; a namespace two queues
serve was charged to the labelled queue by the scheduler and to the first listing it by the cost
ledger. They now all parse the objects with :mod:`gpupool.policy.config` and answer with these
functions (``tests/unit/test_one_rule_per_question.py`` drives each process from the same JSON).

The rules:

* **pool of a node**: the one pool whose ``nodeSelector`` matches its labels; no pool: the
  implicit ``default`` pool; two or more: **none** (the conflict is reported as the pools'
  ``NodeConflict`` condition), because guessing a winner could let shared work onto a node an
  operator meant to be exclusive;
* **overcommit**: a Shared pool's ``computeOvercommit`` and ``memoryOvercommit`` (1.0
  elsewhere): the scheduler packs a GPU's shares up to them and the agent lets them start up to
  the same capacity (:func:`gpu_sharing`, :func:`gpupool.core.model.overcommitted`);
* **pods per GPU**: a Shared pool's ``maxPodsPerGPU``; the implicit default pool
  :data:`~gpupool.policy.spec.DEFAULT_MAX_PODS_PER_GPU`; an Exclusive or MIG pool 1 (a GPU is
  given whole); a node in no pool (two pools select it) 0: it takes no GPU pods until the
  selectors are fixed, and its agent advertises none;
* **queue of a pod**: its ``gpupool.io/queue`` label if that queue serves the pod's namespace;
  else the first queue by name that serves the namespace; else the ``default`` queue. A label
  naming a queue that does not serve the namespace is ignored (the webhook refuses such a pod),
  so a tenant can never charge another team or borrow its priority;
* **class of a pod**: its ``gpupool.io/class`` label if its queue (the rule above) allows that
  class (``spec.allowedClasses``, empty: every class); otherwise **no class**. Admission refuses
  such a pod (a ValidatingAdmissionPolicy and the webhook), but one created before its queue
  changed may still run, and a class decides reclaim exemptions (``exemptClasses``) and pool
  routing (``allowedClasses``, class preference): a class the queue may not use must buy nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpupool.core.model import NodeSpec
from gpupool.core.snapshot import UNLIMITED_PODS_PER_GPU
from gpupool.policy.spec import (
    DEFAULT_MAX_PODS_PER_GPU,
    DEFAULT_QUEUE,
    IMPLICIT_DEFAULT_POOL,
    MODEL_LABEL,
    PoolMode,
    PoolSpec,
    QueueSpec,
)


@dataclass(frozen=True, slots=True)
class NodePool:
    """The pool a node is in.

    Attributes:
        pool: The pool (the implicit default pool when none selects the node); ``None`` when
            two or more pools select it.
        contested: The names of the pools that all select it (empty unless ``pool`` is None).
    """

    pool: PoolSpec | None
    contested: tuple[str, ...] = ()


def node_labels(node: NodeSpec) -> dict[str, str]:
    """A node's labels plus its GPU model under :data:`MODEL_LABEL` (what selectors match)."""
    labels = dict(node.labels)
    if node.gpu_model:
        labels.setdefault(MODEL_LABEL, node.gpu_model)
    return labels


def node_pool(pools: Sequence[PoolSpec], labels: Mapping[str, str]) -> NodePool:
    """The pool of a node with ``labels`` among the GPUPools ``pools``."""
    chosen = [pool for pool in pools if pool.selects(labels)]
    if not chosen:
        return NodePool(IMPLICIT_DEFAULT_POOL)
    if len(chosen) == 1:
        return NodePool(chosen[0])
    return NodePool(None, tuple(pool.name for pool in chosen))


def pods_per_gpu(pool: PoolSpec | None) -> int:
    """How many pods one GPU of a node in ``pool`` may hold (``None``: a contested node).

    :data:`~gpupool.core.snapshot.UNLIMITED_PODS_PER_GPU` only for a default pool compiled
    without a limit (``PolicyConfig.default_pool_max_pods_per_gpu=None``: the FGD trace
    protocol's replay); every GPUPool and the live default pool have a number.
    """
    if pool is None:
        return 0
    if pool.mode is PoolMode.SHARED:
        return pool.max_pods_per_gpu or DEFAULT_MAX_PODS_PER_GPU
    if pool.mode is PoolMode.ANY:
        return pool.max_pods_per_gpu or UNLIMITED_PODS_PER_GPU
    return 1


@dataclass(frozen=True, slots=True)
class GpuSharing:
    """How the GPUs of a node in one pool may be shared.

    Attributes:
        pods_per_gpu: :func:`pods_per_gpu`.
        compute_overcommit: Compute handed out per device (a Shared pool's; 1.0 elsewhere).
        memory_overcommit: GPU memory handed out per physical MiB (likewise).
    """

    pods_per_gpu: int
    compute_overcommit: float = 1.0
    memory_overcommit: float = 1.0


def gpu_sharing(pool: PoolSpec | None) -> GpuSharing:
    """How a GPU of a node in ``pool`` may be shared (``None``: a contested node, no pods)."""
    if pool is None:
        return GpuSharing(0)
    return GpuSharing(pods_per_gpu(pool), pool.compute_overcommit, pool.memory_overcommit)


def queues_serving(queues: Iterable[QueueSpec], namespace: str) -> tuple[QueueSpec, ...]:
    """The queues whose ``spec.namespaces`` list ``namespace``, by name."""
    return tuple(sorted((q for q in queues if namespace in q.namespaces), key=lambda q: q.name))


def pod_queue(queues: Iterable[QueueSpec], namespace: str, label: str = "") -> str:
    """The name of the queue a pod of ``namespace`` with queue label ``label`` is charged to."""
    serving = queues_serving(queues, namespace)
    if label and any(queue.name == label for queue in serving):
        return label
    return serving[0].name if serving else DEFAULT_QUEUE


def pod_class(
    queues: Iterable[QueueSpec], namespace: str, queue_label: str, class_label: str
) -> str:
    """The class a pod counts as: its class label if its queue allows it, else "" (none).

    Args:
        queues: The GPUQueues.
        namespace: The pod's namespace.
        queue_label: Its ``gpupool.io/queue`` label ("" when absent).
        class_label: Its ``gpupool.io/class`` label ("" when absent).
    """
    if not class_label:
        return ""
    specs = tuple(queues)
    name = pod_queue(specs, namespace, queue_label)
    queue = next((spec for spec in specs if spec.name == name), None)
    return class_label if queue is None or queue.allows_class(class_label) else ""
