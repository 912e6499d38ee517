"""Every manifest under deploy/ is accepted by the real API server (server-side dry run).

The API server's validation, defaulting and admission run in full on a dry run (nothing is
stored), so a typo in a field, a wrong apiVersion or a pod template that the namespace's Pod
Security level would refuse fails here instead of at ``kubectl apply`` time. The namespace is
created for real first, as an installation would, because namespaced objects are checked against
it. Then the files are checked against what the code ships and runs with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.install.admission_policy import (
    agent_policy_manifests,
    bypass_policy_manifests,
    declared_runtime_manifests,
    policy_manifests,
    queue_class_manifests,
)
from gpupool.kube.install.rbac import scheduler_role, signing_key_role

from .live_helpers import collection_path, establish_crds, thirdparty_crds

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ROOT = DEPLOY.parent


def _documents(pattern: str = "*.yaml") -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, document)
        for path in sorted(DEPLOY.glob(pattern))
        for document in yaml.safe_load_all(path.read_text())
        if document
    ]


def _scheduler_by_kind() -> dict[str, dict[str, Any]]:
    """The scheduler's documents (its files and the allocation policy) by kind."""
    documents = _documents("scheduler-*.yaml") + _documents("admission-policy.yaml")[:2]
    return {document["kind"]: document for _, document in documents}


async def test_every_manifest_is_accepted_by_a_server_side_dry_run(api: KubeAPI) -> None:
    await establish_crds(api, thirdparty_crds())  # deploy/webhook-cert.yaml uses cert-manager's
    documents = _documents()
    kinds = [document["kind"] for _, document in documents]
    assert {
        "Namespace",
        "ClusterRole",
        "ServiceAccount",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "Deployment",
        "PodDisruptionBudget",
    } <= set(kinds)
    ordered = sorted(documents, key=lambda item: item[1]["kind"] != "Namespace")
    for name, manifest in ordered:
        path = await collection_path(api, manifest)
        response = await api.http.post(
            path,
            params={"dryRun": "All", "fieldValidation": "Strict"},
            content=json.dumps(manifest).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 201, f"{name} {manifest['kind']}: {response.text}"
        # Pod Security (restricted, from the namespace's label) warns about a weak template
        assert "warning" not in response.headers, f"{name}: {response.headers['warning']}"
        if manifest["kind"] == "Namespace":
            try:
                await api.create(path, manifest)
            except ApiError as error:
                if error.status != 409:  # already there from an earlier run: fine
                    raise


def test_the_files_match_what_the_code_installs() -> None:
    by_kind = _scheduler_by_kind()
    assert by_kind["ClusterRole"] == scheduler_role()
    assert by_kind["Role"] == signing_key_role("gpupool-system")
    shipped = [document for _, document in _documents("admission-policy.yaml")]
    assert shipped == policy_manifests() + bypass_policy_manifests() + agent_policy_manifests()
    assert [document for _, document in _documents("queue-class-policy.yaml")] == (
        queue_class_manifests()
    )
    assert [document for _, document in _documents("declared-runtime-policy.yaml")] == (
        declared_runtime_manifests()
    )


def test_the_deployment_runs_the_scheduler_as_its_account_with_probes() -> None:
    by_kind = _scheduler_by_kind()
    deployment = by_kind["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    account = by_kind["ServiceAccount"]["metadata"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["serviceAccountName"] == account["name"]
    assert deployment["metadata"]["namespace"] == account["namespace"] == "gpupool-system"
    assert f"system:serviceaccount:{account['namespace']}:{account['name']}" in json.dumps(
        by_kind["ValidatingAdmissionPolicy"]
    )
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert {"requests", "limits"} <= set(container["resources"])
    labels = deployment["spec"]["selector"]["matchLabels"]
    assert by_kind["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == labels
    assert by_kind["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "USER 65532" in dockerfile
    assert pod["securityContext"]["runAsUser"] == 65532

    # the container's arguments are options gpupool accepts: outside a pod, the only complaint
    # left is the missing kubeconfig
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
    done = subprocess.run(
        [sys.executable, "-m", "gpupool", *container["args"]],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: --kubeconfig: not given, and not in a pod"), done.stderr
