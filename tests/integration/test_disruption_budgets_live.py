"""PodDisruptionBudgets against guarantees on a real API server, written by unprivileged tenants.

kube-controller-manager runs here, so every budget has the status its disruption controller
computes from the pods kwok made Ready (``disruptionsAllowed``), and the Eviction API refuses
exactly what a real cluster would. The borrower's tenant writes its pods and its budget with
rights in its own namespace only; the owner's tenant only its pods.

* a budget over every borrowed pod delays the owner's reclaim only for the pool's
  ``disruptionBudgetWait``: then the victims are deleted, with the grace capped by the pool's
  ``maxEvictionGracePeriodSeconds``, and each victim's Event names the budget;
* a budget over some of the borrowed pods is gone around: the victims are the pods it does not
  protect, evicted at once, and the protected ones are left alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.install.crds import install_crds

from .live_helpers import (
    SchedulerProcesses,
    create_pods,
    events_about,
    gpu_pod,
    grant_role,
    list_pods,
    make_nodes,
    wait_for,
)

pytestmark = pytest.mark.integration

CONTROLLERS = True  # the disruption controller computes the budgets' status
GROUP = "/apis/gpupool.io/v1alpha1"
Json = dict[str, Any]
TENANT_GRACE = 600
"""The borrower's pods ask for ten minutes to terminate; the pool gives them five seconds."""
BORROWER_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["create", "get"]},
]
OWNER_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list"]}]


async def _apply(api: KubeAPI, plural: str, name: str, spec: Json) -> None:
    kind = {"gpupools": "GPUPool", "gpuqueues": "GPUQueue"}[plural]
    body = {"apiVersion": "gpupool.io/v1alpha1", "kind": kind, "metadata": {"name": name}}
    await api.create(f"{GROUP}/{plural}", {**body, "spec": spec})


async def _namespace(api: KubeAPI, name: str) -> str:
    await api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


async def _service_account_made(api: KubeAPI, namespace: str) -> None:
    """ServiceAccount admission is on here: pods wait for the controller's ``default``."""

    async def made() -> bool:
        try:
            await api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
        except ApiError:
            return False
        return True

    await wait_for(made, 60, f"the default ServiceAccount of {namespace}")


def _pod(name: str, selector: dict[str, str], app: str, gpus: int = 1) -> Json:
    pod = gpu_pod(name, gpus=gpus, selector=selector)
    pod["metadata"]["labels"] = {"app": app}
    pod["spec"]["terminationGracePeriodSeconds"] = TENANT_GRACE
    return pod


def _budget(app: str, min_available: int) -> Json:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    }


async def _bound(api: KubeAPI, namespace: str, names: set[str]) -> bool:
    pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
    return all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in names)


@pytest.mark.parametrize(
    ("covered", "wait"),
    [
        pytest.param(("b0", "b1", "b2", "b3"), "5s", id="all-borrowed-pods-covered"),
        pytest.param(("b0", "b1"), "1h", id="half-covered"),
    ],
)
async def test_a_budget_holds_a_reclaim_back_only_for_the_pools_wait(
    api: KubeAPI,
    namespace: str,
    schedulers: SchedulerProcesses,
    control_plane: LocalControlPlane,
    covered: tuple[str, ...],
    wait: str,
) -> None:
    await install_crds(api)
    ns = namespace
    sel = {"test": ns}
    await make_nodes(api, ns, 1, gpus=4)
    pool = f"{ns}-pool"
    await _apply(
        api,
        "gpupools",
        pool,
        {
            "mode": "Exclusive",
            "nodeSelector": sel,
            "disruptionBudgetWait": wait,
            "maxEvictionGracePeriodSeconds": 5,
        },
    )
    owner = await _namespace(api, f"{ns}-owner")
    await _apply(
        api,
        "gpuqueues",
        owner,
        {"namespaces": [owner], "quotas": [{"pool": pool, "guaranteed": 2}]},
    )
    await _apply(api, "gpuqueues", f"{ns}-borrower", {"namespaces": [ns]})
    tenants = {}
    for space, rules in ((ns, BORROWER_RULES), (owner, OWNER_RULES)):
        await _service_account_made(api, space)
        await grant_role(api, space, f"{space}-tenant", rules)
        tenants[space] = KubeAPI.from_kubeconfig(control_plane.user_kubeconfig(f"{space}-tenant"))
    borrowed = {f"b{i}" for i in range(4)}
    try:
        with pytest.raises(ApiError) as refused:  # a tenant, not an administrator
            await tenants[ns].get("/api/v1/nodes")
        assert refused.value.status == 403
        pods = [_pod(n, sel, "serve" if n in covered else "batch") for n in sorted(borrowed)]
        await create_pods(tenants[ns], ns, pods)
        await tenants[ns].create(
            f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
            _budget("serve", len(covered)),
        )
        schedulers.start("solo")
        await wait_for(lambda: _bound(api, ns, borrowed), 60, "the borrower's pods")
        budget_path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/keep"

        async def budget_computed() -> bool:  # every covered pod Ready, none to spare
            status = (await tenants[ns].get(budget_path)).get("status", {})
            return (
                status.get("currentHealthy") == len(covered)
                and status.get("observedGeneration") == 1
            )

        await wait_for(budget_computed, 60, "the disruption controller's status")
        assert (await tenants[ns].get(budget_path))["status"]["disruptionsAllowed"] == 0

        await create_pods(tenants[owner], owner, [gpu_pod("mine", gpus=2, selector=sel)])
        await wait_for(lambda: _bound(api, owner, {"mine"}), 90, "the owner's pod after reclaim")
    finally:
        for tenant in tenants.values():
            await tenant.close()
    left = {p["metadata"]["name"] for p in await list_pods(api, ns)}
    assert len(left) == 2  # two borrowed GPUs taken back, no more
    victims = borrowed - left
    if len(covered) < len(borrowed):
        assert left == set(covered)  # the unprotected pods went, the protected stayed

    async def preempted_events() -> list[str]:
        return [
            e["note"]
            for victim in sorted(victims)
            for e in await events_about(api, ns, victim)
            if e["reason"] == "Preempted"
        ]

    async def reported() -> bool:
        return len(await preempted_events()) == 2

    await wait_for(reported, 30, "a Preempted event on each victim")
    for note in await preempted_events():
        assert f"{owner}/mine" in note
        assert "rule reclaim" in note
        assert f"grace 5 s (its terminationGracePeriodSeconds {TENANT_GRACE} capped" in note
        deleted = f"PodDisruptionBudget {ns}/keep blocked eviction for "
        assert (deleted in note) is (len(covered) == len(borrowed))
        if deleted in note:
            assert "deleted past the pool's disruptionBudgetWait (5 s)" in note

    async def preempting_events() -> list[str]:
        events = await events_about(api, owner, "mine")
        return [e["note"] for e in events if e["reason"] == "Preempting"]

    async def preempting_reported() -> bool:
        return len(await preempting_events()) == 1

    await wait_for(preempting_reported, 30, "the Preempting event on the owner's pod")
    (preempting,) = await preempting_events()
    protected = "2 of them protected by a PodDisruptionBudget"
    assert (protected in preempting) is (len(covered) == len(borrowed))
