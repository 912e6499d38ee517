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

from gpupool.kube.controlplane.serving_label import SERVING_LABEL
from gpupool.kube.install.admission_policy import (
    CLAIM_MANIFEST,
    DECLARED_RUNTIME_POLICY_NAME,
    QUEUE_CLASS_POLICY_NAME,
    agent_policy_manifests,
    bypass_policy_manifests,
    declared_runtime_manifests,
    policy_manifests,
    queue_class_manifests,
)
from gpupool.kube.install.crds import crd_manifests
from gpupool.kube.install.device_classes import device_class_manifests
from gpupool.kube.install.rbac import scheduler_role, signing_key_role
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


def test_admission_policies_name_this_releases_accounts(render: Render) -> None:
    docs = render(
        "controlPlane.schedulerName=gpu-sched", "agent.namespace=gpu-agents", namespace="gpus"
    )
    scheduler = ["system:serviceaccount:gpus:gpupool-scheduler"]
    expected = (
        policy_manifests(scheduler)
        + policy_manifests(scheduler, CLAIM_MANIFEST)
        + bypass_policy_manifests(scheduler, "gpu-sched")
        + agent_policy_manifests(["system:serviceaccount:gpu-agents:gpupool-agent"])
    )
    rendered = [
        bare(find(docs, document["kind"], document["metadata"]["name"])) for document in expected
    ]
    assert rendered == expected
    deployed = list(yaml.safe_load_all((DEPLOY / "claim-admission-policy.yaml").read_text()))
    assert deployed == policy_manifests(manifest=CLAIM_MANIFEST)
    off = render("admissionPolicy.enabled=false")
    assert not [d for d in off if d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_queue_class_policy_is_the_packages_and_deploys(render: Render) -> None:
    docs = render(namespace="gpus")
    rendered = [
        bare(find(docs, "ValidatingAdmissionPolicy", QUEUE_CLASS_POLICY_NAME)),
        bare(find(docs, "ValidatingAdmissionPolicyBinding", QUEUE_CLASS_POLICY_NAME)),
    ]
    assert rendered == queue_class_manifests()
    assert rendered[0]["spec"]["paramKind"] == {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "GPUQueue",
    }
    deployed = [
        d for d in yaml.safe_load_all((DEPLOY / "queue-class-policy.yaml").read_text()) if d
    ]
    assert deployed == queue_class_manifests()


def test_declared_runtime_policy_is_the_packages_and_deploys(render: Render) -> None:
    docs = render(namespace="gpus")
    rendered = [
        bare(find(docs, kind, DECLARED_RUNTIME_POLICY_NAME))
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    ]
    assert rendered == declared_runtime_manifests()
    deployed = [
        d for d in yaml.safe_load_all((DEPLOY / "declared-runtime-policy.yaml").read_text()) if d
    ]
    assert deployed == declared_runtime_manifests()
    off = render("admissionPolicy.enabled=false")
    assert not [d for d in off if d["metadata"]["name"] == DECLARED_RUNTIME_POLICY_NAME]


def test_device_classes_are_the_packages_and_deploys(render: Render) -> None:
    shipped = device_class_manifests()
    assert [d for d in render() if d["kind"] == "DeviceClass"] == shipped
    deployed = [d for d in yaml.safe_load_all((DEPLOY / "device-classes.yaml").read_text()) if d]
    assert deployed == shipped
    assert {d["metadata"]["labels"]["gpupool.io/request-kind"] for d in shipped} == {
        "whole",
        "share",
        "mig",
    }
    off = render("deviceClasses.enabled=false")
    assert not [d for d in off if d["kind"] == "DeviceClass"]


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
    secrets = [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"]
    # the webhook's TLS secret is cert-manager's; the API's and the allocation key are the chart's
    assert sorted(secrets) == ["gpupool-allocation-key", "gpupool-api-tls"]
    certificate = find(docs, "Certificate", "gpupool-webhook")
    assert certificate["spec"]["secretName"] == "gpupool-webhook-tls"
    assert (
        certificate["spec"]["issuerRef"]["name"]
        == find(docs, "Issuer", "gpupool-ca")["metadata"]["name"]
    )
    expected = webhook_configurations(
        None,
        WebhookTarget(service_namespace="gpupool-system", service_name="gpupool-webhook"),
        inject_ca_from="gpupool-system/gpupool-webhook",
    )
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (wanted,) = [d for d in expected.values() if d["kind"] == kind]
        assert bare(find(docs, kind, "gpupool"), keep_annotations=True) == wanted


def _certificate(secret: dict[str, Any]) -> tuple[x509.Certificate, x509.Certificate]:
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    return ca, cert


def test_the_api_is_served_over_tls_with_the_charts_certificate(render: Render) -> None:
    docs = render(namespace="gpus")
    _, cert = _certificate(find(docs, "Secret", "gpupool-api-tls"))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"gpupool-scheduler.gpus.svc", "localhost"} <= set(
        names.get_values_for_type(x509.DNSName)
    )
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    pod = find(docs, "Deployment", "gpupool-scheduler")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key"} <= set(container["args"])
    assert "--api-audience=gpupool.io/api" in container["args"]
    assert "--insecure-local" not in container["args"]
    assert pod["volumes"] == [{"name": "tls", "secret": {"secretName": "gpupool-api-tls"}}]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS", probe
    managed = render("controlPlane.certificate=cert-manager")
    assert not [d for d in managed if d["kind"] == "Secret" and "api" in d["metadata"]["name"]]
    certificate = find(managed, "Certificate", "gpupool-api")
    assert certificate["spec"]["secretName"] == "gpupool-api-tls"
    assert certificate["spec"]["ipAddresses"] == ["127.0.0.1"]
    assert len([d for d in managed if d["kind"] == "Issuer"]) == 2  # one chain for both
    both = render("controlPlane.certificate=cert-manager", "webhook.certificate=cert-manager")
    assert len([d for d in both if d["kind"] == "Issuer"]) == 2


def test_control_plane_leader_election_and_arguments_gpupool_accepts(render: Render) -> None:
    docs = render()
    deployment = find(docs, "Deployment", "gpupool-scheduler")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] == "gpupool-scheduler"
    assert "--lease-namespace=gpupool-system" in container["args"]
    # the release owns the Lease and the key pair; a replica outliving helm uninstall must not
    # make either again outside it (the next install would refuse them)
    assert find(docs, "Lease", "gpupool-scheduler")["metadata"]["labels"]
    assert {"--no-create-lease", "--no-create-signing-key"} <= set(container["args"])
    # each replica is its pod in the Lease: with hostNetwork, replicas on one node share the
    # host name and both run as PID 1, so hostname-pid would be one identity for two leaders
    on_host = find(render("hostNetwork=true"), "Deployment", "gpupool-scheduler")
    for rendered in (container, on_host["spec"]["template"]["spec"]["containers"][0]):
        assert "--identity=$(POD_NAME)" in rendered["args"]
        pod_name = {"fieldRef": {"fieldPath": "metadata.name"}}
        assert {"name": "POD_NAME", "valueFrom": pod_name} in rendered["env"]
    assert find(docs, "PodDisruptionBudget", "gpupool-scheduler")["spec"]["minAvailable"] == 1
    # the API Service: the leader only, by the label it keeps on its own pod; metrics: all
    own_pod = "--serving-pod=$(POD_NAMESPACE)/$(POD_NAME)"
    assert own_pod in container["args"]
    pod_namespace = {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert {"name": "POD_NAMESPACE", "valueFrom": pod_namespace} in container["env"]
    replicas = deployment["spec"]["selector"]["matchLabels"]
    service = find(docs, "Service", "gpupool-scheduler")
    assert service["spec"]["selector"] == {**replicas, SERVING_LABEL: "true"}
    assert find(docs, "Service", "gpupool-scheduler-metrics")["spec"]["selector"] == replicas
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


def test_store_and_governance_settings_reach_the_processes(render: Render) -> None:
    """The store's URL from a Secret (it carries the password), never from a plain value."""

    def control_plane(docs: list[dict[str, Any]]) -> dict[str, Any]:
        deployment = find(docs, "Deployment", "gpupool-scheduler")
        container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
        return container

    plain = control_plane(render())
    assert "--governance-interval=5" in plain["args"]
    assert not any(e["name"] == "GPUPOOL_DB_URL" for e in plain.get("env") or [])
    stored = control_plane(
        render("controlPlane.store.urlSecret=audit-db,controlPlane.store.urlKey=dsn")
    )
    (url,) = [e for e in stored["env"] if e["name"] == "GPUPOOL_DB_URL"]
    assert url["valueFrom"]["secretKeyRef"] == {"name": "audit-db", "key": "dsn"}
    assert "--claims" not in plain["args"]  # resource.k8s.io/v1 only from Kubernetes 1.34
    assert "--claims" in control_plane(render("controlPlane.claims=true"))["args"]
    off = control_plane(render("controlPlane.governance.enabled=false"))
    assert "--no-governance" in off["args"]
    assert not any(a.startswith("--governance-interval") for a in off["args"])
    agent = find(render("agent.usagePeriodSeconds=5"), "DaemonSet", "gpupool-agent")
    assert "--usage-period=5" in agent["spec"]["template"]["spec"]["containers"][0]["args"]


def test_agent_rbac_is_deploys_with_the_key_role_in_the_release_namespace(render: Render) -> None:
    docs = render(namespace="gpus")
    deployed = [d for d in yaml.safe_load_all((DEPLOY / "agent-rbac.yaml").read_text()) if d]
    (role,) = [d for d in deployed if d["kind"] == "ClusterRole"]
    assert bare(find(docs, "ClusterRole", "gpupool-agent")) == role
    (key_role,) = [d for d in deployed if d["kind"] == "Role"]
    key_role["metadata"]["namespace"] = "gpus"
    assert bare(find(docs, "Role", "gpupool-agent-key")) == key_role
    args = find(docs, "DaemonSet", "gpupool-agent")["spec"]["template"]["spec"]["containers"][0]
    assert "--key-namespace=gpus" in args["args"]


def test_agent_daemonset(render: Render) -> None:
    docs = render()
    daemonset = find(docs, "DaemonSet", "gpupool-agent")
    pod = daemonset["spec"]["template"]["spec"]
    assert daemonset["metadata"]["namespace"] == "kube-system"
    assert pod["priorityClassName"] == "system-node-critical"
    paths = {v["hostPath"]["path"] for v in pod["volumes"]}
    assert {"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources"} <= paths
    assert [c["name"] for c in pod["containers"]] == ["agent", "mps-control"]
    assert "--collect-after=300" in pod["containers"][0]["args"]
    sooner = find(render("agent.collectAfterSeconds=60"), "DaemonSet", "gpupool-agent")
    assert "--collect-after=60" in sooner["spec"]["template"]["spec"]["containers"][0]["args"]
    visible = render("agent.isolation=visible")
    pod = find(visible, "DaemonSet", "gpupool-agent")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["agent"]
    assert not [d for d in render("agent.enabled=false") if "agent" in d["metadata"]["name"]]


def test_plain_agent_daemonset_runs_what_the_chart_runs(render: Render) -> None:
    """deploy/agent-daemonset.yaml is the chart's DaemonSet with its default values.

    The two had drifted: the plain one started the MPS control daemon without the loop that
    feeds it the agent's limits, so its shares ran with the daemon's defaults (the whole GPU).
    The pod template is compared whole; only the chart's own labels may differ.
    """
    (plain,) = [d for d in yaml.safe_load_all((DEPLOY / "agent-daemonset.yaml").read_text()) if d]
    charted = find(render(), "DaemonSet", "gpupool-agent")
    assert plain["metadata"]["namespace"] == charted["metadata"]["namespace"]
    assert plain["spec"]["template"]["spec"] == charted["spec"]["template"]["spec"]
    assert plain["spec"]["updateStrategy"] == charted["spec"]["updateStrategy"]
    names = plain["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
    assert names == charted["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]


def test_service_monitor_behind_a_flag(render: Render) -> None:
    assert not [d for d in render() if d["kind"] == "ServiceMonitor"]
    docs = render("serviceMonitor.enabled=true", "serviceMonitor.labels.release=prom")
    monitor = find(docs, "ServiceMonitor", "gpupool-scheduler")
    service = find(docs, "Service", "gpupool-scheduler-metrics")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    selected = [
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "Service"
        and set(monitor["spec"]["selector"]["matchLabels"].items())
        <= set(d["metadata"]["labels"].items())
    ]
    assert selected == ["gpupool-scheduler-metrics"]  # every replica, not the leader's only
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"] == {"secret": {"name": "gpupool-api-tls", "key": "ca.crt"}}


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
