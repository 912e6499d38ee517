"""Every manifest the Helm chart renders is accepted by the real API server (server-side dry run).

The chart is rendered by helm built from its Go module (scripts/build-helm.sh) with its default
values, with the REST API and admission policy switched off, and with cert-manager and the
ServiceMonitor switched on. The control-plane namespace is created for real with the restricted
Pod Security level, as the chart's notes ask, and the chart's CRDs are dry-run first. A Pod
Security warning fails the test as a refusal would. For the last variant the API server is
first given cert-manager's and the Prometheus operator's CRDs, generated from those projects'
Go API types (scripts/thirdparty-crds.sh).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.kube.client.api import ApiError, KubeAPI

from .live_helpers import collection_path, establish_crds, thirdparty_crds

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpupool"
NAMESPACE = "gpupool-system"


def _rendered(*values: str) -> list[dict[str, Any]]:
    configured = os.environ.get("GPUPOOL_HELM", "")
    found = sorted((Path.home() / ".cache" / "gpupool" / "helm").glob("helm-*/bin/helm"))
    helm = configured or (str(found[-1]) if found else "")
    if not helm:
        pytest.fail("helm not found: run scripts/build-helm.sh (make test does)")
    sets = [arg for value in values for arg in ("--set", value)]
    done = subprocess.run(
        [helm, "template", "gpupool", str(CHART), "--namespace", NAMESPACE, *sets],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.mark.parametrize(
    "values",
    [
        (),
        ("controlPlane.api=false", "admissionPolicy.enabled=false"),
        (
            "webhook.certificate=cert-manager",
            "controlPlane.certificate=cert-manager",
            "serviceMonitor.enabled=true",
        ),
    ],
)
async def test_every_rendered_manifest_passes_a_server_side_dry_run(
    api: KubeAPI, values: tuple[str, ...]
) -> None:
    if "serviceMonitor.enabled=true" in values:
        await establish_crds(api, thirdparty_crds())
    try:
        await api.create(
            "/api/v1/namespaces",
            {
                "metadata": {
                    "name": NAMESPACE,
                    "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
                }
            },
        )
    except ApiError as error:
        if error.status != 409:
            raise
    documents = _rendered(*values)
    kinds = {d["kind"] for d in documents}
    assert {"CustomResourceDefinition", "Deployment", "DaemonSet"} <= kinds
    if values and values[0] == "webhook.certificate=cert-manager":
        assert {"Certificate", "Issuer", "ServiceMonitor"} <= kinds
    ordered = sorted(documents, key=lambda d: d["kind"] != "CustomResourceDefinition")
    for manifest in ordered:
        path = await collection_path(api, manifest)
        response = await api.http.post(
            path,
            params={"dryRun": "All", "fieldValidation": "Strict"},
            content=json.dumps(manifest).encode(),
            headers={"Content-Type": "application/json"},
        )
        name = f"{manifest['kind']} {manifest['metadata']['name']}"
        assert response.status_code == 201, f"{name}: {response.text}"
        assert "warning" not in response.headers, f"{name}: {response.headers['warning']}"
