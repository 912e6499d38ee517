"""The Helm chart renders, and what it renders is what the code ships and runs with.

Each check compares a rendered object with its source of truth in the package or in deploy/
(the scheduler's and webhook's roles, the CRDs, the allocation admission policy, the webhook
configurations the code generates), so the chart cannot drift from them. The server-side dry run
of every rendered manifest is tests/integration/test_helm_dry_run.py.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509

from gpupool.kube.admission_policy import policy_manifests
from gpupool.kube.crds import crd_manifests
from gpupool.kube.rbac import scheduler_role, signing_key_role
from gpupool.webhook.configuration import WebhookTarget, webhook_configurations

from .conftest import CHART, Render, helm_binary, helm_template

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
GENERATED = {"labels", "annotations"}


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def bare(doc: dict[str, Any], *, keep_annotations: bool = False) -> dict[str, Any]:
    """The object without the chart's labels (and annotations unless kept)."""
    dropped = {"labels"} if keep_annotations else GENERATED
    metadata = {k: v for k, v in doc["metadata"].items() if k not in dropped}
    return doc | {"metadata": metadata}


def test_crds_are_the_packages_and_kept_on_uninstall(render: Render) -> None:
    docs = render()
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    for crd in crds:
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert [bare(c) for c in crds] == crd_manifests()


def test_rbac_is_the_schedulers_and_webhooks(render: Render) -> None:
    docs = render(namespace="gpus")
    assert bare(find(docs, "ClusterRole", "gpupool-scheduler")) == scheduler_role()
    assert bare(find(docs, "Role", "gpupool-scheduler-key")) == signing_key_role("gpus")
    deployed = next(
        d
        for d in yaml.safe_load_all((DEPLOY / "webhook.yaml").read_text())
        if d and d["kind"] == "ClusterRole"
    )
    assert bare(find(docs, "ClusterRole", "gpupool-webhook")) == deployed
    delegator = find(docs, "ClusterRoleBinding", "gpupool-scheduler-auth-delegator")
    assert delegator["roleRef"]["name"] == "system:auth-delegator"
    assert delegator["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpupool-scheduler", "namespace": "gpus"}
    ]
    no_api = render("controlPlane.api=false")
    assert not [d for d in no_api if d["metadata"]["name"] == "gpupool-scheduler-auth-delegator"]
    args = find(no_api, "Deployment", "gpupool-scheduler")["spec"]["template"]["spec"]
    assert "--no-api" in args["containers"][0]["args"]


def test_admission_policy_allows_this_releases_scheduler(render: Render) -> None:
    docs = render(namespace="gpus")
    policy = find(docs, "ValidatingAdmissionPolicy", "gpupool-allocation-writers")
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "gpupool-allocation-writers")
    expected = policy_manifests(["system:serviceaccount:gpus:gpupool-scheduler"])
    assert [bare(policy), bare(binding)] == expected
    off = render("admissionPolicy.enabled=false")
    assert not [d for d in off if d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_webhook_configurations_are_the_codes_with_a_ca_helm_made(render: Render) -> None:
    docs = render("webhook.failurePolicy=Ignore", namespace="gpus")
    secret = find(docs, "Secret", "gpupool-webhook-tls")
    ca_pem = base64.b64decode(secret["data"]["ca.crt"])
    expected = webhook_configurations(
        ca_pem,
        WebhookTarget(service_namespace="gpus", service_name="gpupool-webhook"),
        failure_policy="Ignore",
        webhook_namespace="gpus",
    )
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (wanted,) = [d for d in expected.values() if d["kind"] == kind]
        assert bare(find(docs, kind, "gpupool")) == wanted
    # the serving certificate is signed by that CA, for the Service's names
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gpupool-webhook.gpus.svc" in names.get_values_for_type(x509.DNSName)


def test_webhook_with_cert_manager(render: Render) -> None:
    docs = render("webhook.certificate=cert-manager")
    assert not [d for d in docs if d["kind"] == "Secret"]
    certificate = find(docs, "Certificate", "gpupool-webhook")
    assert certificate["spec"]["secretName"] == "gpupool-webhook-tls"
    expected = webhook_configurations(
        None,
        WebhookTarget(service_namespace="gpupool-system", service_name="gpupool-webhook"),
        inject_ca_from="gpupool-system/gpupool-webhook",
    )
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (wanted,) = [d for d in expected.values() if d["kind"] == kind]
        assert bare(find(docs, kind, "gpupool"), keep_annotations=True) == wanted


def test_control_plane_leader_election_and_arguments_gpupool_accepts(render: Render) -> None:
    docs = render()
    deployment = find(docs, "Deployment", "gpupool-scheduler")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] == "gpupool-scheduler"
    assert "--lease-namespace=gpupool-system" in container["args"]
    assert find(docs, "PodDisruptionBudget", "gpupool-scheduler")["spec"]["minAvailable"] == 1
    service = find(docs, "Service", "gpupool-scheduler")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
    for args in (
        container["args"],
        find(docs, "Deployment", "gpupool-webhook")["spec"]["template"]["spec"]["containers"][0][
            "args"
        ],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "gpupool", *args, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
        assert done.returncode == 0, f"{args}: {done.stderr}"


def test_agent_daemonset(render: Render) -> None:
    docs = render()
    daemonset = find(docs, "DaemonSet", "gpupool-agent")
    pod = daemonset["spec"]["template"]["spec"]
    assert daemonset["metadata"]["namespace"] == "kube-system"
    assert pod["priorityClassName"] == "system-node-critical"
    paths = {v["hostPath"]["path"] for v in pod["volumes"]}
    assert {"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources"} <= paths
    assert [c["name"] for c in pod["containers"]] == ["agent", "mps-control"]
    visible = render("agent.isolation=visible")
    pod = find(visible, "DaemonSet", "gpupool-agent")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["agent"]
    assert not [d for d in render("agent.enabled=false") if "agent" in d["metadata"]["name"]]


def test_service_monitor_behind_a_flag(render: Render) -> None:
    assert not [d for d in render() if d["kind"] == "ServiceMonitor"]
    docs = render("serviceMonitor.enabled=true", "serviceMonitor.labels.release=prom")
    monitor = find(docs, "ServiceMonitor", "gpupool-scheduler")
    service = find(docs, "Service", "gpupool-scheduler")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert set(monitor["spec"]["selector"]["matchLabels"].items()) <= set(
        service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}


def test_values_schema_names_the_bad_field() -> None:
    for value, field in (
        ("webhook.failurePolicy=Maybe", "failurePolicy"),
        ("controlPlane.replicas=0", "replicas"),
        ("agent.isolation=none", "isolation"),
        ("controlPlane.typo=1", "typo"),
    ):
        done = helm_template(value)
        assert done.returncode != 0, value
        assert field in done.stderr, done.stderr
    assert json.loads((DEPLOY / "helm" / "gpupool" / "values.schema.json").read_text())


def test_helm_lint_strict() -> None:
    done = subprocess.run(
        [str(helm_binary()), "lint", "--strict", str(CHART)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
