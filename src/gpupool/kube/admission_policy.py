"""The admission policy that lets only the scheduler write a pod's allocation record.

``gpupool.io/allocation`` says which GPUs a pod holds; the scheduler rebuilds its state from it
after a restart and the node agent will hand out devices by it. A tenant who could write it
could claim GPUs it was never given, or make the scheduler give its GPUs to someone else. The
check is a ValidatingAdmissionPolicy (CEL evaluated inside the API server), not a webhook: it
cannot be down, needs no certificates, and applies to every user, ``system:masters`` included.

The policy refuses any CREATE or UPDATE of a pod, of any pod subresource (``pods/binding`` and
``pods/status`` can both write annotations) and of the older ``bindings`` resource that sets,
changes or removes the annotation, unless the request comes from one of the scheduler
identities. docs/architecture.md ("Who can write the allocation") has the experiments behind
each of these.

:func:`gpupool.kube.crds.install_crds` installs it with the definitions. The identities are
written into the policy's match condition when it is installed, so the policy has no parameter
object that a tenant (or a mistake) could change independently.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

import yaml

POLICY_NAME = "gpupool-allocation-writers"
POLICY_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
DEFAULT_SCHEDULER_IDENTITIES = ("system:serviceaccount:gpupool-system:gpupool-scheduler",)
"""The ServiceAccount of deploy/scheduler-deployment.yaml, as the API server names it."""

_MANIFEST = "allocation-writers.yaml"


def _shipped() -> list[dict[str, Any]]:
    text = (resources.files("gpupool.kube") / "manifests" / _MANIFEST).read_text("utf-8")
    return [document for document in yaml.safe_load_all(text) if document]


def check_identities(identities: Sequence[str]) -> None:
    """Refuse identities that cannot be written safely into a CEL string literal.

    Raises:
        ValueError: No identity, or one that is empty or holds a quote, a backslash or a
            control character; the message names ``--scheduler-identity``.
    """
    if not identities:
        raise ValueError("--scheduler-identity: at least one identity is needed")
    for identity in identities:
        if not identity or any(c in identity for c in "\"'\\") or not identity.isprintable():
            raise ValueError(
                f"--scheduler-identity: {identity!r} must be a non-empty user name without "
                "quotes, backslashes or control characters"
            )


def match_expression(identities: Sequence[str]) -> str:
    """The CEL match condition: the request does not come from one of ``identities``."""
    check_identities(identities)
    return f"!(request.userInfo.username in {json.dumps(list(identities))})"


def policy_manifests(
    identities: Sequence[str] = DEFAULT_SCHEDULER_IDENTITIES,
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, allowing exactly ``identities``.

    Raises:
        ValueError: A bad identity (see :func:`check_identities`).
    """
    policy, binding = (copy.deepcopy(document) for document in _shipped())
    (condition,) = policy["spec"]["matchConditions"]
    condition["expression"] = match_expression(identities)
    return [policy, binding]
