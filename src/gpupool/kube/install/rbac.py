"""The scheduler's RBAC roles (cluster-wide, and its signing key's), and granting them.

The role is the least ``gpupool control-plane`` needs (``tests/integration/test_rbac.py`` runs
the scheduler with exactly it). It ships in the package, not only in ``deploy/``, because
``gpupool dev-cluster up`` runs from an installed wheel and must give its scheduler user the same
rights a real installation gives the ServiceAccount: a dev cluster whose scheduler ran as admin
would hide a missing permission until production.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.install.crds import apply_object

ROLE_NAME = "gpupool-scheduler"
KEY_ROLE_NAME = "gpupool-scheduler-key"
CLUSTER_ROLES = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
CLUSTER_ROLE_BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"

Subject = dict[str, str]


def _manifests() -> list[dict[str, Any]]:
    text = (
        resources.files("gpupool.kube.install") / "manifests" / "scheduler-role.yaml"
    ).read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def scheduler_role() -> dict[str, Any]:
    """The ClusterRole ``gpupool-scheduler``."""
    return next(doc for doc in _manifests() if doc["kind"] == "ClusterRole")


def signing_key_role(namespace: str = "gpupool-system") -> dict[str, Any]:
    """The Role that lets the scheduler read and create its signing key in ``namespace``."""
    role = next(doc for doc in _manifests() if doc["kind"] == "Role")
    role["metadata"]["namespace"] = namespace
    return role


def user(name: str) -> Subject:
    """An RBAC subject for the user ``name`` (a client certificate's CN)."""
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}


async def grant_scheduler_role(
    api: KubeAPI, subject: str | Subject, namespace: str = "kube-system"
) -> None:
    """Install the scheduler's roles and bind ``subject`` to them (idempotent).

    ``subject`` is a user name or an RBAC subject (a ServiceAccount); ``namespace`` is where the
    scheduler keeps its Lease and signing key.
    """
    who = user(subject) if isinstance(subject, str) else subject
    suffix = who["name"] if who["kind"] == "User" else f"{who['namespace']}-{who['name']}"
    rbac = "rbac.authorization.k8s.io"
    await apply_object(api, CLUSTER_ROLES, scheduler_role())
    await apply_object(
        api,
        CLUSTER_ROLE_BINDINGS,
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{ROLE_NAME}-{suffix}"},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": ROLE_NAME},
            "subjects": [who],
        },
    )
    base = f"/apis/{rbac}/v1/namespaces/{namespace}"
    await apply_object(api, f"{base}/roles", signing_key_role(namespace))
    await apply_object(
        api,
        f"{base}/rolebindings",
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{KEY_ROLE_NAME}-{suffix}", "namespace": namespace},
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": KEY_ROLE_NAME},
            "subjects": [who],
        },
    )
