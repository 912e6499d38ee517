"""The chart's settings for a cluster without a pod network or GPUs (the dev cluster's real node).

``hostNetwork``, ``apiServer.host/port``, ``agent.fakeGpus`` and the ports are what installing the
chart on ``gpupool dev-cluster up --real-node`` needs (tests/e2e/test_helm_install.py does it);
here: they reach every gpupool pod, and only when set.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from gpupool.agent.fakenvml import PRESETS
from gpupool.kube.objects.signing import KEY_SECRET_NAME, PRIVATE_KEY_FIELD, RecordSigner

from .conftest import CHART, Render
from .test_helm_chart import find

WORKLOADS = ("Deployment", "DaemonSet")


def _pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] in WORKLOADS
    }


def test_fake_gpu_presets_are_the_fake_nvmls() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    enum = schema["properties"]["agent"]["properties"]["fakeGpus"]["enum"]
    assert enum == ["", *PRESETS]


def test_defaults_use_the_pod_network_and_the_kubernetes_service(render: Render) -> None:
    for name, pod in _pods(render()).items():
        assert "hostNetwork" not in pod, name
        for container in pod["containers"]:
            names = {e["name"] for e in container.get("env", [])}
            assert "KUBERNETES_SERVICE_HOST" not in names, name
    agent = _pods(render())["gpupool-agent"]["containers"]
    assert [c["name"] for c in agent] == ["agent", "mps-control"]
    assert not any(a.startswith("--fake-gpus") for a in agent[0]["args"])


def test_node_settings_reach_every_gpupool_pod(render: Render) -> None:
    docs = render(
        "hostNetwork=true",
        "apiServer.host=127.0.0.1",
        "apiServer.port=6443",
        "agent.fakeGpus=h100",
        "agent.mpsControlDaemon=false",
        "agent.metricsPort=19400",
        "webhook.port=18443",
    )
    pods = _pods(docs)
    assert set(pods) == {"gpupool-scheduler", "gpupool-webhook", "gpupool-agent"}
    for name, pod in pods.items():
        assert pod["hostNetwork"] is True, name
        assert pod["dnsPolicy"] == "ClusterFirstWithHostNet", name
        (container,) = pod["containers"]  # no MPS daemon beside the agent
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1", name
        assert env["KUBERNETES_SERVICE_PORT"] == "6443", name
    agent = pods["gpupool-agent"]["containers"][0]
    assert "--fake-gpus=h100" in agent["args"]
    assert "--metrics-port=19400" in agent["args"]
    assert agent["ports"] == [{"name": "metrics", "containerPort": 19400}]
    webhook = pods["gpupool-webhook"]["containers"][0]
    assert webhook["args"][-2:] == ["--port", "18443"]
    assert webhook["ports"] == [{"name": "https", "containerPort": 18443}]


def test_the_release_owns_the_control_planes_run_time_objects(render: Render) -> None:
    """The Lease and the signing key pair: created by the chart, so uninstall removes them."""
    docs = render("controlPlane.lease.name=my-lease", namespace="gpus")
    lease = find(docs, "Lease", "my-lease")
    assert lease["metadata"]["namespace"] == "gpus"
    secret = find(docs, "Secret", KEY_SECRET_NAME)
    assert secret["metadata"]["namespace"] == "gpus"
    pem = base64.b64decode(secret["data"][PRIVATE_KEY_FIELD], validate=True)
    RecordSigner.from_private_pem(pem)  # an Ed25519 key the scheduler accepts
    again = find(render(namespace="gpus"), "Secret", KEY_SECRET_NAME)
    assert again["data"][PRIVATE_KEY_FIELD] != secret["data"][PRIVATE_KEY_FIELD]  # per install
    assert find(docs, "ConfigMap", KEY_SECRET_NAME)["metadata"]["namespace"] == "gpus"
