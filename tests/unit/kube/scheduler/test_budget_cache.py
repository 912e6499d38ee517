"""The PodDisruptionBudget cache: whom a budget covers (as evictions decide), kept current."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gpupool.kube.client.informer import ADDED, DELETED, MODIFIED
from gpupool.kube.objects.disruption_budget import DisruptionBudgetRecord
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.budget_cache import BudgetCache

from ..builders import annotated, node, pod
from ..live_recorder import Recorder, live_scheduler, settle

Json = dict[str, Any]
APP = {"app": "serve", "tier": "gpu"}


def budget(
    name: str = "keep",
    selector: Json | None = None,
    allowed: int = 0,
    namespace: str = "team",
    version: str = "1",
) -> DisruptionBudgetRecord:
    spec: Json = {"maxUnavailable": 0}
    if selector is not None:
        spec["selector"] = selector
    obj = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": version,
        },
        "spec": spec,
        "status": {"disruptionsAllowed": allowed},
    }
    return msgspec.json.decode(msgspec.json.encode(obj), type=DisruptionBudgetRecord)


def cache_with(*pods: PodRecord) -> tuple[BudgetCache, list[int]]:
    woken: list[int] = []
    store = {p.metadata.uid: p for p in pods}
    cache = BudgetCache(None, store, lambda: woken.append(1))  # type: ignore[arg-type]
    for p in pods:
        cache.on_pod(p, gone=False)
    return cache, woken


@pytest.mark.parametrize(
    ("selector", "labels", "namespace", "covered"),
    [
        pytest.param({"matchLabels": {"app": "serve"}}, APP, "team", True, id="match-labels"),
        pytest.param({"matchLabels": {"app": "train"}}, APP, "team", False, id="other-labels"),
        pytest.param({"matchLabels": {"app": "serve"}}, APP, "other", False, id="other-namespace"),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "x"]}]},
            APP, "team", True, id="expression-in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]},
            APP, "team", False, id="expression-not-in",
        ),
        pytest.param(
            {"matchLabels": {"app": "serve"},
             "matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]},
            APP, "team", True, id="labels-and-expressions",
        ),
        pytest.param({}, {}, "team", True, id="empty-selector-covers-every-pod-of-its-namespace"),
        pytest.param(None, APP, "team", False, id="no-selector-covers-nothing"),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]},
            APP, "team", False, id="an-operator-labels-do-not-have-covers-nothing",
        ),
    ],
)  # fmt: skip
def test_a_budget_covers_the_pods_of_its_namespace_its_selector_matches(
    selector: Json | None, labels: dict[str, str], namespace: str, covered: bool
) -> None:
    serving = pod("serving", namespace=namespace, labels=labels)
    cache, _ = cache_with(serving)
    cache.informer.handler(ADDED, budget(selector=selector))
    assert cache.of(serving) == (("team/keep",) if covered else ())


def test_coverage_and_allowance_follow_pod_labels_and_budget_changes() -> None:
    serving = pod("serving", namespace="team", labels=APP)
    other = pod("other", namespace="team", labels={"app": "train"})
    cache, woken = cache_with(serving, other)
    cache.informer.handler(ADDED, budget(selector={"matchLabels": {"app": "serve"}}))
    assert cache.budgets().covering == {"uid-serving": ("team/keep",)}
    assert cache.budgets().allowed == {"team/keep": 0}
    # a status change moves only the allowance
    cache.informer.handler(MODIFIED, budget(selector={"matchLabels": {"app": "serve"}}, allowed=1))
    assert cache.budgets().allowed == {"team/keep": 1}
    # a tenant relabels its pod out of the budget, another in
    relabelled = pod("serving", namespace="team", labels={"app": "x"}, resource_version="2")
    cache.pods[relabelled.metadata.uid] = relabelled  # type: ignore[index]
    cache.on_pod(relabelled, gone=False)
    assert cache.of(relabelled) == ()
    # a new selector is applied to the pods already there
    cache.informer.handler(MODIFIED, budget(selector={"matchLabels": {"app": "train"}}))
    assert cache.budgets().covering == {"uid-other": ("team/keep",)}
    cache.on_pod(other, gone=True)
    assert cache.budgets().covering == {}
    cache.informer.handler(DELETED, budget(selector={"matchLabels": {"app": "train"}}))
    assert cache.budgets().allowed == {}
    assert cache.by_namespace == {}
    assert len(woken) == 4


async def test_the_live_scheduler_evicts_the_victim_no_budget_protects() -> None:
    recorder = Recorder()
    scheduler = live_scheduler(recorder)
    scheduler._on_node(ADDED, node("n0", gpus=2))
    started = (("old", 0, "2025-01-01T00:00:00Z"), ("young", 1, "2025-01-02T00:00:00Z"))
    for name, gpu, created in started:
        scheduler._on_pod(
            ADDED,
            pod(
                name,
                gpus=1,
                node="n0",
                priority=1,
                labels={"app": name},
                created=created,
                annotations=annotated("n0", (gpu,), uid=f"uid-{name}"),
            ),
        )
    scheduler.budgets.informer.handler(
        ADDED, budget(namespace="default", selector={"matchLabels": {"app": "young"}})
    )
    scheduler._on_pod(ADDED, pod("high", gpus=1, priority=100))
    try:
        await scheduler.cycle()
        await settle(scheduler)
        evicted = [path for path, _ in recorder.posted("/eviction")]
        assert evicted == ["/api/v1/namespaces/default/pods/old/eviction"]
    finally:
        scheduler.preemptions.evictor.cancel_all()
