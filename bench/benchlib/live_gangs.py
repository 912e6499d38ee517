"""Gangs in ``bench live``: the pods in PodGroups of ``--gangs N`` that start whole or not at all.

``--gangs 8`` puts consecutive pods into Kubernetes 1.37 PodGroups (``scheduling.k8s.io/v1beta1``,
``gang.minCount`` 8), made before the pods; each pod names its group in
``spec.schedulingGroup``. gpupool decides a gang whole (:mod:`gpupool.scheduling.gangs`);
kube-scheduler 1.37.2, whose control plane runs with ``GenericWorkload`` on, schedules the same
groups with its own gang scheduling. The phase's pods are all bound at the end either way (the
nodes have room for every pod); :func:`check_gangs` counts the groups the run ended with fewer
than all of their pods bound, which must be none, and the bench reports the time to the last
gang's bind.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gpupool.kube.client.api import JsonObject, KubeAPI

GROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{}/podgroups"


def gang_of(index: int, size: int) -> str:
    """The PodGroup of pod ``index`` ("" when there are no gangs)."""
    return f"g-{index // size}" if size else ""


def with_gang(pod: JsonObject, gang: str) -> JsonObject:
    """``pod`` naming its PodGroup (unchanged for "")."""
    if not gang:
        return pod
    return {**pod, "spec": {**pod["spec"], "schedulingGroup": {"podGroupName": gang}}}


async def create_groups(
    api: KubeAPI, namespace: str, pods: int, size: int, concurrency: int
) -> None:
    """The phase's PodGroups, each of ``minCount`` ``size`` (the last may be smaller)."""
    path = GROUPS.format(namespace)
    limit = asyncio.Semaphore(concurrency)

    async def create(group: int) -> None:
        members = min(size, pods - group * size)
        body = {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": f"g-{group}"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": members}}},
        }
        async with limit:
            await api.create(path, body)

    await asyncio.gather(*(create(group) for group in range(-(-pods // size))))


def check_gangs(pods: Sequence[JsonObject]) -> dict[str, Any]:
    """Groups, and those with some pods bound and some not (must be 0)."""
    bound: Counter[str] = Counter()
    members: Counter[str] = Counter()
    for pod in pods:
        group = (pod["spec"].get("schedulingGroup") or {}).get("podGroupName")
        if group:
            members[group] += 1
            bound[group] += bool(pod["spec"].get("nodeName"))
    partial = sorted(g for g in members if 0 < bound[g] < members[g])
    return {"groups": len(members), "partial": len(partial), "partial_names": partial[:10]}
