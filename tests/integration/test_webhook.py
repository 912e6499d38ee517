"""The real kube-apiserver calls ``gpupool webhook`` over TLS: pods mutated, refused, or let
through when the webhook is down, as the failure policy says.

Each test starts its own webhook process (a certificate for 127.0.0.1 from the cluster's test
CA), registers it with :func:`webhook_configurations` (the code ``gpupool webhook install``
runs), and waits for the API server to pick the configuration up (its informer takes a moment)
by dry-run creates, which run admission but store nothing.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gpupool.devcluster.certs import SecretVolume, write_serving_cert
from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.kube.client.api import MERGE_PATCH, ApiError, KubeAPI
from gpupool.kube.install.crds import install_crds
from gpupool.kube.objects.dra.records import CLASSES_PATH
from gpupool.webhook.configuration import (
    FailurePolicy,
    WebhookTarget,
    install_webhook,
    uninstall_webhook,
    webhook_configurations,
)

from .live_helpers import grant_cluster_role, hammer_while, served_serial
from .webhook_helpers import WebhookProcess, create_pod, pod, refusal

pytestmark = pytest.mark.integration

QUEUES = "/apis/gpupool.io/v1alpha1/gpuqueues"
DENIED = 'admission webhook "pods.mutate.gpupool.io" denied the request: '
LIMIT = "spec.containers[0].resources.limits"
StartWebhook = Callable[..., WebhookProcess]
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "webhook.yaml"
USER = "gpupool-webhook"


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.3)


@pytest.fixture(autouse=True)
async def crds(api: KubeAPI) -> None:
    await install_crds(api)


class Registration:
    """The webhook configurations of one test, installed and replaced as it goes."""

    def __init__(self, api: KubeAPI, ca: Path, name: str) -> None:
        self.api, self.ca, self.name = api, ca, name

    async def point_at(self, process: WebhookProcess, policy: FailurePolicy = "Fail") -> None:
        configs = webhook_configurations(
            self.ca.read_bytes(),
            WebhookTarget(url=process.url),
            name=self.name,
            failure_policy=policy,
            timeout_seconds=5,
        )
        await install_webhook(self.api, configs)


@pytest.fixture
async def registration(
    api: KubeAPI, namespace: str, webhook_tls: tuple[Path, Path, Path]
) -> AsyncIterator[Registration]:
    registered = Registration(api, webhook_tls[0], f"gpupool-{namespace}")
    try:
        yield registered
    finally:
        await uninstall_webhook(api, registered.name)


async def queue(api: KubeAPI, name: str, *namespaces: str) -> None:
    body = {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "GPUQueue",
        "metadata": {"name": name},
        "spec": {"namespaces": list(namespaces)},
    }
    await api.create(QUEUES, body)


async def routed(api: KubeAPI, namespace: str) -> bool:
    """Whether a dry-run GPU pod comes back routed to gpupool (the webhook is being called)."""
    try:
        result = await create_pod(
            api, namespace, pod("probe", {"gpupool.io/gpu": "1"}), dry_run=True
        )
    except ApiError:
        return False
    return bool(result["spec"]["schedulerName"] == "gpupool")


async def as_webhook_role(api: KubeAPI, control_plane: LocalControlPlane) -> Path:
    """A kubeconfig for a user bound to exactly the ClusterRole of deploy/webhook.yaml."""
    await grant_cluster_role(api, DEPLOY, USER)
    return control_plane.user_kubeconfig(USER)


async def test_a_down_webhook_blocks_only_updates_of_the_fields_it_judges(
    api: KubeAPI, namespace: str, registration: Registration, start_webhook: StartWebhook
) -> None:
    """A Job controller's finalizer edit of a GPU pod gets through while no replica answers.

    ``failurePolicy: Fail`` still holds for what the webhook judges on update (the queue and
    class labels, the allocation annotation): the configuration's ``judged-update`` condition
    only keeps the other updates from being sent at all.
    """
    await queue(api, f"q-{namespace}", namespace)
    process = start_webhook()
    await registration.point_at(process, "Fail")
    await eventually(lambda: routed(api, namespace), "the webhook to be called")
    body = pod("job-pod", {"gpupool.io/gpu": "1"}, finalizers=["batch.kubernetes.io/job-tracking"])
    await eventually(lambda: _admitted(api, namespace, body), "the webhook to see the queue")
    await create_pod(api, namespace, body)
    assert process.stop() == 0
    path = f"/api/v1/namespaces/{namespace}/pods/job-pod"

    async def judged_update_refused() -> bool:
        relabel = {"metadata": {"labels": {"gpupool.io/class": "other"}}}
        try:
            await api.request("PATCH", path, body=relabel, params={"dryRun": "All"},
                              content_type=MERGE_PATCH)  # fmt: skip
        except ApiError as error:
            return "failed calling webhook" in error.message
        return False

    await eventually(judged_update_refused, "the API server to find the webhook down")
    with pytest.raises(ApiError) as refused:  # the allocation annotation: still closed
        await api.patch(path, {"metadata": {"annotations": {"gpupool.io/allocation": "{}"}}})
    assert 'failed calling webhook "pods.mutate.gpupool.io"' in refused.value.message
    await api.patch(path, {"metadata": {"labels": {"job-name": "x"}}})  # not judged: admitted
    await api.delete(path)  # the pod is kept (Terminating) by its finalizer
    assert (await api.get(path))["metadata"].get("deletionTimestamp")
    await api.patch(path, {"metadata": {"finalizers": None}})  # the Job controller's last edit
    with pytest.raises(ApiError) as gone:
        await api.get(path)
    assert gone.value.status == 404


async def test_the_api_server_has_a_gpu_pod_routed_queued_and_classed(
    api: KubeAPI,
    namespace: str,
    registration: Registration,
    start_webhook: StartWebhook,
    control_plane: LocalControlPlane,
    webhook_tls: tuple[Path, Path, Path],
) -> None:
    """The webhook runs with only its role, registered by ``gpupool webhook install``."""
    await queue(api, f"q-{namespace}", namespace)
    process = start_webhook(await as_webhook_role(api, control_plane))
    command = [
        sys.executable, "-m", "gpupool", "webhook", "install",
        "--kubeconfig", str(control_plane.kubeconfig),
        "--ca", str(webhook_tls[0]),
        "--url", process.url,
        "--name", registration.name,
    ]  # fmt: skip
    installed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert installed.returncode == 0, installed.stderr
    assert "failurePolicy Fail" in installed.stdout
    await eventually(lambda: routed(api, namespace), "the webhook to be called")
    body = pod("train", {"gpupool.io/gpu": "1", "gpupool.io/gpu-cores": "50"})
    body["metadata"]["labels"] = {"app": "train"}

    async def queued() -> bool:
        stored = await create_pod(api, namespace, body, dry_run=True)
        return bool(stored["metadata"]["labels"].get("gpupool.io/queue"))

    await eventually(queued, "the webhook to see the queue")
    stored = await create_pod(api, namespace, body)
    assert stored["spec"]["schedulerName"] == "gpupool"
    assert stored["metadata"]["labels"] == {
        "app": "train",
        "gpupool.io/queue": f"q-{namespace}",
        "gpupool.io/class": "default",
    }
    assert "gpupool.io/allocation" not in stored["metadata"].get("annotations", {})
    # a pod that does not mention gpupool is never sent (matchConditions), so never changed
    plain = await create_pod(api, namespace, pod("plain"))
    assert plain["spec"]["schedulerName"] == "default-scheduler"
    assert "labels" not in plain["metadata"]
    await _claim_pods_are_routed_by_what_their_claims_ask(api, namespace)


async def _claim_pods_are_routed_by_what_their_claims_ask(api: KubeAPI, namespace: str) -> None:
    """A pod naming a template of gpupool's class is routed, queued and classed like a GPU pod;
    one naming a claim of another driver's class, or a claim not made yet, is left alone."""
    foreign = f"nic-{namespace}.example.com"
    await api.create(
        CLASSES_PATH,
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": foreign}},
    )
    try:
        base = f"/apis/resource.k8s.io/v1/namespaces/{namespace}"
        await api.create(f"{base}/resourceclaimtemplates", _template("one-gpu", "gpu.gpupool.io"))
        nic = _template("nic", foreign)
        nic |= {"kind": "ResourceClaim", "spec": {"devices": _devices(foreign)}}
        await api.create(f"{base}/resourceclaims", nic)
        routed_pod = await create_pod(api, namespace, _claim_pod("dra-train", template="one-gpu"))
        assert routed_pod["spec"]["schedulerName"] == "gpupool"
        assert routed_pod["metadata"]["labels"] == {
            "gpupool.io/queue": f"q-{namespace}",
            "gpupool.io/class": "default",
        }
        for name, source in (("dra-nic", {"claim": "nic"}), ("dra-later", {"claim": "later"})):
            left = await create_pod(api, namespace, _claim_pod(name, **source))
            assert left["spec"]["schedulerName"] == "default-scheduler", name
            assert "labels" not in left["metadata"], name
    finally:
        await api.delete(f"{CLASSES_PATH}/{foreign}")


def _devices(device_class: str) -> dict[str, object]:
    return {"requests": [{"name": "dev", "exactly": {"deviceClassName": device_class}}]}


def _template(name: str, device_class: str) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": _devices(device_class)}},
    }


def _claim_pod(name: str, *, template: str = "", claim: str = "") -> dict[str, object]:
    body = pod(name)
    source = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
    body["spec"]["resourceClaims"] = [{"name": "dev", **source}]
    body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "dev"}]}
    return body


async def test_malformed_pods_are_refused_naming_the_field(
    api: KubeAPI, namespace: str, registration: Registration, start_webhook: StartWebhook
) -> None:
    await create_nodes(api, [FakeGpuNode(f"{namespace}-h100", gpus=8, gpu_memory_mib=81559)])
    await queue(api, f"q-{namespace}", namespace)
    await queue(api, f"other-{namespace}", f"{namespace}-other")
    await registration.point_at(start_webhook())
    await eventually(lambda: routed(api, namespace), "the webhook to be called")
    too_big = pod("big", {"gpupool.io/gpu": "1", "gpupool.io/gpu-memory": "90001"})

    async def knows_the_nodes() -> bool:
        return "the largest GPU in the cluster" in await refusal(api, namespace, too_big)

    await eventually(knows_the_nodes, "the webhook to see the node")
    cases = [
        (
            pod("cores", {"gpupool.io/gpu": "1", "gpupool.io/gpu-cores": "150"}),
            f"{LIMIT}[gpupool.io/gpu-cores]: must be a whole number of percent of each GPU's "
            "compute in 1..100, got '150'",
        ),
        (
            pod("half", {"gpupool.io/gpu": "500m"}),
            f"{LIMIT}[gpupool.io/gpu]: must be a whole number of GPUs in 0..8 (the most GPUs on "
            "one node), got '500m'",
        ),
        (
            too_big,
            f"{LIMIT}[gpupool.io/gpu-memory]: must be a whole number of MiB per GPU in 1..81559 "
            "(the largest GPU in the cluster), got '90001'",
        ),
        (
            pod("mixed", {"gpupool.io/gpu": "1", "gpupool.io/mig-1g.10gb": "1"}),
            f"{LIMIT}[gpupool.io/mig-1g.10gb]: unknown MIG profile '1g.10gb'; the nodes offer: "
            "none",
        ),
        (
            pod("model", {"gpupool.io/gpu": "1"}, annotations={"gpupool.io/gpu-model": "B200"}),
            "metadata.annotations[gpupool.io/gpu-model]: unknown GPU model(s) B200; the nodes "
            "have: H100 (separate models with '|')",
        ),
        (
            pod("jump", {"gpupool.io/gpu": "1"}, labels={"gpupool.io/queue": f"other-{namespace}"}),
            f"metadata.labels[gpupool.io/queue]: queue 'other-{namespace}' does not serve "
            f"namespace '{namespace}'; allowed: q-{namespace}",
        ),
        (
            pod("forged", annotations={"gpupool.io/allocation": '{"node": "x"}'}),
            "metadata.annotations[gpupool.io/allocation]: is written by the gpupool scheduler "
            "only, when it binds the pod",
        ),
    ]
    for body, expected in cases:
        assert await refusal(api, namespace, body) == DENIED + expected
    other = pod("volcano", {"gpupool.io/gpu": "1"})
    other["spec"]["schedulerName"] = "volcano"
    assert "spec.schedulerName: a pod asking for gpupool resources" in await refusal(
        api, namespace, other
    )


async def test_an_update_cannot_move_a_pod_to_a_queue_of_another_namespace(
    api: KubeAPI, namespace: str, registration: Registration, start_webhook: StartWebhook
) -> None:
    await queue(api, f"q-{namespace}", namespace)
    await queue(api, f"other-{namespace}", f"{namespace}-other")
    await registration.point_at(start_webhook())
    await eventually(lambda: routed(api, namespace), "the webhook to be called")
    body = pod("p", {"gpupool.io/gpu": "1"}, labels={"gpupool.io/queue": f"q-{namespace}"})
    await eventually(lambda: _admitted(api, namespace, body), "the webhook to see the queue")
    await create_pod(api, namespace, body)
    path = f"/api/v1/namespaces/{namespace}/pods/p"
    with pytest.raises(ApiError) as refused:
        await api.patch(path, {"metadata": {"labels": {"gpupool.io/queue": f"other-{namespace}"}}})
    assert "metadata.labels[gpupool.io/queue]: queue 'other-" in refused.value.message
    with pytest.raises(ApiError) as forged:
        await api.patch(path, {"metadata": {"annotations": {"gpupool.io/allocation": "{}"}}})
    assert "metadata.annotations[gpupool.io/allocation]" in forged.value.message
    await api.patch(path, {"metadata": {"labels": {"team": "x"}}})  # anything else may change


async def _admitted(api: KubeAPI, namespace: str, body: dict[str, object]) -> bool:
    return await refusal(api, namespace, body) == ""


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_a_webhook_that_is_down_fails_as_configured(
    api: KubeAPI,
    namespace: str,
    registration: Registration,
    start_webhook: StartWebhook,
    policy: FailurePolicy,
) -> None:
    process = start_webhook()
    await registration.point_at(process, policy)
    await eventually(lambda: routed(api, namespace), "the webhook to be called")
    assert process.stop() == 0  # SIGTERM: a clean exit
    gpu_pod = pod("gpu", {"gpupool.io/gpu": "1"})
    if policy == "Fail":  # closed: nothing asking for gpupool resources gets in unchecked

        async def refused() -> bool:
            return "failed calling webhook" in await refusal(api, namespace, gpu_pod)

        await eventually(refused, "the API server to find the webhook down")
        message = await refusal(api, namespace, gpu_pod)
        assert 'failed calling webhook "pods.mutate.gpupool.io"' in message
    else:  # open: admitted as written, neither checked nor routed

        async def admitted_unrouted() -> bool:
            try:
                result = await create_pod(api, namespace, gpu_pod, dry_run=True)
            except ApiError:
                return False
            return bool(result["spec"]["schedulerName"] == "default-scheduler")

        await eventually(admitted_unrouted, "the API server to find the webhook down")
        stored = await create_pod(api, namespace, gpu_pod)
        assert stored["spec"]["schedulerName"] == "default-scheduler"
    # either way, pods that do not mention gpupool are never sent to it, so never blocked,
    # and pods naming claims go to the claims webhook, which fails open
    plain = await create_pod(api, namespace, pod("plain", {"nvidia.com/gpu": "1"}))
    assert plain["metadata"]["name"] == "plain"
    with_claim = await create_pod(api, namespace, _claim_pod("with-claim", claim="any"))
    assert with_claim["spec"]["schedulerName"] == "default-scheduler"


async def test_a_renewed_certificate_is_served_without_a_restart(
    api: KubeAPI,
    namespace: str,
    registration: Registration,
    control_plane: LocalControlPlane,
    tmp_path: Path,
    secret_volume: SecretVolume,
) -> None:
    """The mounted Secret is swapped under a running webhook (failurePolicy Fail): every call,
    the API server's and fresh handshakes alike, succeeds, and new handshakes get the new one."""
    pki = control_plane.folder / "pki"
    ca = pki / "ca.crt"

    def publish(name: str) -> None:
        cert, key = write_serving_cert(pki, name, ["127.0.0.1"])
        secret_volume.write({"tls.crt": cert.read_bytes(), "tls.key": key.read_bytes()})

    publish("webhook-old")
    process = WebhookProcess(
        control_plane.kubeconfig,
        secret_volume.path("tls.crt"),
        secret_volume.path("tls.key"),
        ca,
        tmp_path / "renewed.log",
    )
    try:
        await asyncio.to_thread(process.wait_ready)
        await registration.point_at(process, "Fail")
        await eventually(lambda: routed(api, namespace), "the webhook to be called")
        old = await asyncio.to_thread(served_serial, process.url, ca)
        refused: list[bool] = []
        calls = asyncio.create_task(_keep_creating(api, namespace, refused))
        answered, failures = await hammer_while(process.url, ca, lambda: publish("webhook-new"))
        calls.cancel()
        await asyncio.gather(calls, return_exceptions=True)
        assert failures == []
        assert answered > 10
        assert len(refused) > 3
        assert not any(refused), "an API server call failed during the swap"
        new = await asyncio.to_thread(served_serial, process.url, ca)
        assert new != old
        assert process.process.poll() is None  # the same process
        assert await routed(api, namespace)
    finally:
        process.stop()


async def _keep_creating(api: KubeAPI, namespace: str, refused: list[bool]) -> None:
    """Dry-run GPU pods through the API server until cancelled; whether each was not routed."""
    while True:
        refused.append(not await routed(api, namespace))
        await asyncio.sleep(0.05)
