"""How this node's GPUs may be shared: devices advertised per GPU, and capacity under overcommit.

The node's pool and its pods per GPU are decided by the rules the scheduler uses
(:func:`gpupool.policy.membership.node_pool` and :func:`~gpupool.policy.membership.pods_per_gpu`,
over GPUPools parsed by :func:`gpupool.policy.config.parse_objects`): a Shared pool's
``maxPodsPerGPU``; one device per GPU in an Exclusive or MIG pool; the implicit default pool's
:data:`~gpupool.policy.spec.DEFAULT_MAX_PODS_PER_GPU` on a node no pool selects; none on a node
two pools select (it takes no GPU pods until the selectors are fixed). There is no agent flag
for it: the scheduler cannot see one, and a kubelet admitting fewer pods than the scheduler
binds fails the extra ones (``UnexpectedAdmissionError``).

The labels matched are the node's, with the GPU labels this agent is about to publish, so a fresh
node is judged as the scheduler will see it. Without the GPUPool CRD there are no pools (the
scheduler's view too): every node is in the default pool. Read at start and then every minute, so a
pool edit reaches the kubelet without a restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.policy.config import parse_objects
from gpupool.policy.membership import GpuSharing, gpu_sharing, node_pool

POOLS_PATH = "/apis/gpupool.io/v1alpha1/gpupools"


def sharing_for(pools: Iterable[Mapping[str, Any]], labels: Mapping[str, str]) -> GpuSharing:
    """How GPUs of a node with ``labels`` among ``pools`` (raw GPUPool objects) are shared."""
    config, _ = parse_objects(pools, [])
    return gpu_sharing(node_pool(config.pools, labels).pool)


async def node_sharing(api: KubeAPI, node: str, published: Mapping[str, str | None]) -> GpuSharing:
    """How ``node``'s GPUs are shared, from the GPUPools in the cluster.

    Args:
        api: The API port.
        node: The node's name.
        published: The labels the agent writes on the node (``None``: removed).
    """
    labels = dict((await api.get(f"/api/v1/nodes/{node}"))["metadata"].get("labels", {}))
    for key, value in published.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    try:
        pools = await api.list_items(POOLS_PATH)
    except ApiError as error:
        if error.status != 404:
            raise
        pools = []  # the CRDs are not installed: no pools, as the scheduler sees it too
    return sharing_for(pools, labels)
