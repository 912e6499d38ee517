"""Pods as the API server sends them in an AdmissionReview, cluster facts, and JSONPatch."""

from __future__ import annotations

import copy
from typing import Any

from gpupool.policy.spec import QueueSpec
from gpupool.webhook.facts import ClusterFacts

Json = dict[str, Any]

FACTS = ClusterFacts(
    models=frozenset({"H100", "A100"}),
    largest_gpu_memory_mib=81559,
    most_gpus_per_node=8,
    mig_profiles=frozenset({"1g.10gb", "3g.40gb"}),
    queues={
        "research": QueueSpec("research", frozenset({"team-a", "shared"})),
        "prod": QueueSpec("prod", frozenset({"team-b", "shared"})),
        "closed": QueueSpec("closed", frozenset({"team-c"}), max_concurrent_pods=0),
    },
)


def pod(
    limits: dict[str, str] | None = None,
    *,
    requests: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str = "default-scheduler",
    namespace: str = "team-a",
) -> Json:
    """A pod after the API server's defaulting, as a mutating webhook receives it (no uid)."""
    metadata: Json = {"generateName": "job-", "namespace": namespace}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    resources: Json = {"limits": limits or {}, "requests": {"cpu": "1", **(requests or {})}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "schedulerName": scheduler,
            "priority": 0,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "cuda", "resources": resources}],
        },
    }


def apply_patch(obj: Json, patch: list[Json]) -> Json:
    """Apply JSONPatch ``add`` operations (the only kind the webhook emits) as RFC 6902 says."""
    result = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] == "add", op
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = result
        for part in parts[:-1]:
            target = target[part]
        target[parts[-1]] = copy.deepcopy(op["value"])
    return result
