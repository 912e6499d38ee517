"""The names gpupool uses in Kubernetes objects: resources, labels, annotations.

One module so that the scheduler, the fake nodes, the bench, the CRDs and (later) the webhook and
the node agent cannot drift apart.

Pods ask with extended resources in ``limits`` (or ``requests``):

- ``gpupool.io/gpu: N`` alone: N whole GPUs, exclusive;
- plus ``gpupool.io/gpu-memory`` (MiB per GPU) and/or ``gpupool.io/gpu-cores`` (percent of each
  GPU's compute): a share of each of N GPUs;
- ``gpupool.io/mig-<profile>: 1``: one MIG slice.

Nodes say what they have: ``gpupool.io/gpu`` in allocatable (GPU count), the labels
``gpupool.io/gpu-model`` and ``gpupool.io/gpu-memory-mib``, MIG slices as ``gpupool.io/mig-*``
allocatable, and the annotation ``gpupool.io/gpu-uuids`` (comma-separated, index order).
"""

from __future__ import annotations

SCHEDULER_NAME = "gpupool"
"""``spec.schedulerName`` of the pods gpupool schedules."""

RESOURCE_PREFIX = "gpupool.io/"
"""Every gpupool resource's name starts so; the scheduler has a field for each."""
RESOURCE_GPU = "gpupool.io/gpu"
RESOURCE_GPU_MEMORY = "gpupool.io/gpu-memory"
RESOURCE_GPU_CORES = "gpupool.io/gpu-cores"
RESOURCE_MIG_PREFIX = "gpupool.io/mig-"

LABEL_GPU_MODEL = "gpupool.io/gpu-model"
LABEL_GPU_MEMORY = "gpupool.io/gpu-memory-mib"
LABEL_QUEUE = "gpupool.io/queue"
LABEL_CLASS = "gpupool.io/class"

ANNOTATION_GPU_UUIDS = "gpupool.io/gpu-uuids"
ANNOTATION_ALLOWED_MODELS = "gpupool.io/gpu-model"
"""Pod annotation: allowed GPU models separated by ``|`` (``"H100|A100"``)."""
ANNOTATION_EXPECTED_RUNTIME = "gpupool.io/expected-runtime"
"""Pod annotation: declared runtime (``90m``, ``2h``, or seconds), used only to order backfill."""
ANNOTATION_ALLOCATION = "gpupool.io/allocation"
"""Pod annotation written by the scheduler only, in the binding call: the allocation record."""

FIELD_MANAGER = "gpupool-scheduler"

ANNOTATION_GPU_UNHEALTHY = "gpupool.io/gpu-unhealthy"
"""Node annotation written by the node agent: UUIDs of GPUs broken by a critical XID."""
ANNOTATION_HANDOFF_REFUSED = "gpupool.io/handoff-refused"
"""Node annotation written by the node agent: the request kinds (``whole``, ``share``) whose last
hand-off it refused for a reason of the node's own (a GPU it counts as full, a missing MPS
daemon), as JSON ``{"share": "why"}``: the scheduler keeps that kind of pod off the node until
the entry goes (a later hand-off of the kind succeeds, or the agent's retry time passes)."""
ANNOTATION_GPU_LINKS = "gpupool.io/gpu-nvlink-domains"
"""Node annotation written by the node agent: the NVLink domain of each GPU in the order of
``gpupool.io/gpu-uuids`` (``0,0,0,0,1,1,1,1``: two islands of four joined by NVLink), present
only when the node has more than one domain."""
ANNOTATION_GPU_NUMA = "gpupool.io/gpu-numa-nodes"
"""Node annotation written by the node agent: the host NUMA node of each GPU in the same order,
present only when NVML names one for every GPU and they are not all the same."""
SCHEDULED_NODE_ANNOTATIONS = (
    ANNOTATION_GPU_UUIDS,
    ANNOTATION_GPU_UNHEALTHY,
    ANNOTATION_HANDOFF_REFUSED,
    ANNOTATION_GPU_LINKS,
    ANNOTATION_GPU_NUMA,
)
"""The node annotations placement reads: a change in one rebuilds the scheduler's snapshot."""
ANNOTATION_GPU_USAGE = "gpupool.io/gpu-usage"
"""Node annotation written by the node agent: per-pod GPU usage, the idle-detection signal
(its fields: :class:`gpupool.kube.objects.usage_signal.UsageSignal`; ``periodSeconds``, how
often the agent publishes, decides when its samples are stale)."""
ANNOTATION_GPU_CONTENTION = "gpupool.io/gpu-contention"
"""Node annotation written by the node agent: per contended GPU index its contention level,
score, reasons and each pod's estimated slowdown (its fields:
:class:`gpupool.kube.objects.contention_signal.ContentionSignal`); placement reads it when the
pool sets ``spec.contention``."""
AGENT_FIELD_MANAGER = "gpupool-agent"
ANNOTATION_GOVERNANCE_WARNED = "gpupool.io/governance-warned"
"""Pod annotation written by the governance controller: ``<rule>@<RFC 3339 time>`` of the
warning it gave (idle or past its share duration); the pod is reclaimed after the grace period
unless the rule stops firing."""
