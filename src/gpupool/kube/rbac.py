"""The scheduler's RBAC role, and granting it to a user.

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

from gpupool.kube.api import KubeAPI
from gpupool.kube.crds import apply_object

ROLE_NAME = "gpupool-scheduler"
CLUSTER_ROLES = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
CLUSTER_ROLE_BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"


def scheduler_role() -> dict[str, Any]:
    """The ClusterRole ``gpupool-scheduler``."""
    text = (resources.files("gpupool.kube") / "manifests" / "scheduler-role.yaml").read_text()
    role: dict[str, Any] = yaml.safe_load(text)
    return role


async def grant_scheduler_role(api: KubeAPI, user: str) -> None:
    """Install the role and bind the user ``user`` to it (idempotent)."""
    await apply_object(api, CLUSTER_ROLES, scheduler_role())
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{ROLE_NAME}-{user}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": ROLE_NAME,
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    await apply_object(api, CLUSTER_ROLE_BINDINGS, binding)
