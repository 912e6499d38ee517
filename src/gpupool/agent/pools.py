"""How many devices each GPU is advertised as: the ``maxPodsPerGPU`` of the node's pool.

The node's pool is the first ``GPUPool`` (by name) whose ``spec.nodeSelector`` labels all
match the node's labels, the same rule the scheduler's pool code uses. Exclusive and MIG pools
give one device per GPU; a Shared pool gives ``spec.shared.maxPodsPerGPU`` (the CRD's default
is 4). A node in no pool uses ``gpupool agent --max-pods-per-gpu`` (default 4). Read at start
and then every minute, so a pool edit reaches the kubelet without a restart.
"""

from __future__ import annotations

from typing import Any

from gpupool.kube.api import KubeAPI

POOLS_PATH = "/apis/gpupool.io/v1alpha1/gpupools"
DEFAULT_MAX_PODS_PER_GPU = 4


def slots_for(pools: list[dict[str, Any]], labels: dict[str, str], default: int) -> int:
    """Devices per GPU for a node with ``labels`` among ``pools`` (raw GPUPool objects)."""
    for pool in sorted(pools, key=lambda p: str(p.get("metadata", {}).get("name", ""))):
        spec = pool.get("spec", {})
        selector: dict[str, str] = spec.get("nodeSelector") or {}
        if any(labels.get(key) != value for key, value in selector.items()):
            continue
        if spec.get("mode") != "Shared":
            return 1
        shared = spec.get("shared") or {}
        return int(shared.get("maxPodsPerGPU", DEFAULT_MAX_PODS_PER_GPU))
    return default


async def node_slots(api: KubeAPI, node: str, default: int) -> int:
    """Devices per GPU for ``node``, from the GPUPools in the cluster."""
    labels = (await api.get(f"/api/v1/nodes/{node}"))["metadata"].get("labels", {})
    return slots_for(await api.list_items(POOLS_PATH), labels, default)
