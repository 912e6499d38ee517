"""A class its queues do not allow: refused at admission by the ValidatingAdmissionPolicy.

``gpupool install-crds`` (here :func:`install_crds` with the scheduler's identity) installs
``gpupool-queue-classes``, which takes every GPUQueue as a parameter. A tenant with the pod rights
of the ``edit`` role creates and relabels pods; no webhook runs, so what is refused is refused by
the API server alone. The message is the webhook's, word for word. The module has its own
control plane (conftest), so the policy does not reach other modules.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.install.admission_policy import POLICY_PATH, QUEUE_CLASS_POLICY_NAME
from gpupool.kube.install.crds import install_crds
from gpupool.webhook.admission import class_refusal_message

from .live_helpers import gpu_pod, grant_role, wait_for
from .test_admission_policy import EDIT_POD_RULES

TENANT = "tenant"
QUEUES = "/apis/gpupool.io/v1alpha1/gpuqueues"
DENIED = (
    f"ValidatingAdmissionPolicy '{QUEUE_CLASS_POLICY_NAME}' with binding "
    f"'{QUEUE_CLASS_POLICY_NAME}' denied request: "
)


def _pod(name: str, workload_class: str | None) -> dict[str, Any]:
    pod = gpu_pod(name)
    pod["metadata"]["labels"] = (
        {} if workload_class is None else {"gpupool.io/class": workload_class}
    )
    return pod


async def _queue(api: KubeAPI, name: str, namespace: str, classes: list[str]) -> None:
    spec: dict[str, Any] = {"namespaces": [namespace]}
    if classes:
        spec["allowedClasses"] = classes
    body = {"apiVersion": "gpupool.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": name}}
    await api.create(QUEUES, {**body, "spec": spec})


async def _until_refused(
    api: KubeAPI, namespace: str, workload_class: str, message: str, what: str
) -> None:
    """Wait until a dry-run pod of ``workload_class`` is refused with ``message`` in it.

    A new policy, binding or parameter object takes a moment to be applied.
    """
    path = f"/api/v1/namespaces/{namespace}/pods"
    probe = _pod("probe", workload_class)

    async def refused() -> bool:
        try:
            await api.request("POST", path, body=probe, params={"dryRun": "All"})
        except ApiError as error:
            return message in error.message
        return False

    await wait_for(refused, 30, what)


@pytest.fixture
async def tenant(
    api: KubeAPI, namespace: str, control_plane: LocalControlPlane
) -> AsyncIterator[KubeAPI]:
    """The tenant's client, with the policy installed and one queue serving the namespace."""
    await install_crds(api, scheduler_identities=("gpupool-scheduler",))
    await grant_role(api, namespace, TENANT, EDIT_POD_RULES)
    await _queue(api, f"train-{namespace}", namespace, ["training", "dev"])
    await _until_refused(api, namespace, "serving", DENIED, "the class policy to be enforced")
    client = KubeAPI.from_kubeconfig(control_plane.user_kubeconfig(TENANT))
    try:
        yield client
    finally:
        await client.close()


async def test_the_policy_type_checks(tenant: KubeAPI, api: KubeAPI) -> None:
    stored = await api.get(f"{POLICY_PATH}/{QUEUE_CLASS_POLICY_NAME}")
    assert stored["status"].get("typeChecking", {}).get("expressionWarnings") is None


async def test_a_tenant_cannot_use_a_class_its_queue_does_not_allow(
    tenant: KubeAPI, namespace: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods"
    expected = class_refusal_message("serving", f"train-{namespace}", namespace)
    with pytest.raises(ApiError) as refused:
        await tenant.create(path, _pod("serve", "serving"))
    assert refused.value.status == 403
    assert DENIED + expected in refused.value.message
    assert "metadata.labels[gpupool.io/class]" in refused.value.message
    assert "spec.allowedClasses" in refused.value.message

    await tenant.create(path, _pod("train", "training"))  # an allowed class
    await tenant.create(path, _pod("plain", None))  # no class: nothing to refuse
    with pytest.raises(ApiError) as relabelled:  # nor may a label be changed to it later
        await tenant.patch(
            f"{path}/train", {"metadata": {"labels": {"gpupool.io/class": "serving"}}}
        )
    assert DENIED + expected in relabelled.value.message
    with pytest.raises(ApiError):
        await tenant.patch(
            f"{path}/plain", {"metadata": {"labels": {"gpupool.io/class": "serving"}}}
        )
    # other changes of a pod with an allowed class stay the tenant's to make
    await tenant.patch(f"{path}/train", {"metadata": {"labels": {"team": "a"}}})
    await tenant.patch(f"{path}/train", {"metadata": {"labels": {"gpupool.io/class": "dev"}}})


async def test_every_queue_serving_the_namespace_must_allow_the_class(
    tenant: KubeAPI, api: KubeAPI, namespace: str
) -> None:
    """One evaluation sees one queue, so a label choosing a queue cannot be relied on."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    await _queue(api, f"any-{namespace}", namespace, [])  # every class
    await _queue(api, f"serve-{namespace}", namespace, ["serving"])
    expected = class_refusal_message("training", f"serve-{namespace}", namespace)
    await _until_refused(api, namespace, "training", expected, "the new queue to be a parameter")
    body = _pod("labelled", "training")
    body["metadata"]["labels"]["gpupool.io/queue"] = f"train-{namespace}"
    with pytest.raises(ApiError) as refused:
        await tenant.create(path, body)
    assert expected in refused.value.message
    await tenant.create(path, _pod("plain", None))
    # a pod in a namespace no queue serves may carry any class (the default queue allows all)
    other = f"{namespace}-free"
    await api.create("/api/v1/namespaces", {"metadata": {"name": other}})
    await api.create(f"/api/v1/namespaces/{other}/pods", _pod("free", "serving"))
