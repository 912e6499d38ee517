"""The admission policies that keep tenants and nodes from writing what gpupool believes.

Six ValidatingAdmissionPolicies (CEL evaluated inside the API server, not webhooks: they cannot
be down, need no certificates, and apply to every user, ``system:masters`` included):

* ``gpupool-allocation-writers``: only the scheduler writes a pod's ``gpupool.io/allocation``,
  which says which GPUs a pod holds (the scheduler rebuilds its state from it, the node agent
  hands out devices by it). It refuses any CREATE or UPDATE of a pod, of any pod subresource
  (``pods/binding`` and ``pods/status`` can both write annotations) and of the older
  ``bindings`` resource that sets, changes or removes the annotation, unless the request comes
  from a scheduler identity. docs/architecture.md ("Who can write the allocation") has the
  experiments behind each of these.
* ``gpupool-claim-allocation-writers``: the same rule for ResourceClaims: only the scheduler
  allocates gpupool's devices and writes ``gpupool.io/claim-allocation``.
* ``gpupool-placed-by-scheduler``: a pod asking for gpupool resources (or for the gpupool
  scheduler) is not created with ``spec.nodeName`` set by anyone but a scheduler identity, so no
  tenant places a GPU pod past the scheduler's quotas and records.
* ``gpupool-agent-own-node``: the node agent's identity writes only the Node its
  ServiceAccount token is bound to (the token's node claim), and Events reported by that node.
* ``gpupool-queue-classes``: a pod's ``gpupool.io/class`` is one that every GPUQueue serving
  its namespace allows (``spec.allowedClasses``); its parameters are the GPUQueues themselves,
  since what it checks is policy a cluster admin writes, not an identity.
* ``gpupool-declared-runtime``: a pod's ``gpupool.io/expected-runtime`` is fixed at creation
  (it bought the pod's backfill slot and is its time limit), and its ``gpupool.io/queue`` and
  ``gpupool.io/class`` labels once it is bound (its signed record charges it to that queue),
  for every user.

:func:`gpupool.kube.install.crds.install_crds` installs them with the definitions. The
identities are written into the policies' match conditions when they are installed, so there is
no parameter object that a tenant (or a mistake) could change independently (the queue-classes
policy's parameters, GPUQueues, are cluster-scoped objects tenants cannot write).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

import yaml

POLICY_NAME = "gpupool-allocation-writers"
BYPASS_POLICY_NAME = "gpupool-placed-by-scheduler"
AGENT_POLICY_NAME = "gpupool-agent-own-node"
POLICY_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
DEFAULT_SCHEDULER_IDENTITIES = ("system:serviceaccount:gpupool-system:gpupool-scheduler",)
"""The ServiceAccount of deploy/scheduler-deployment.yaml, as the API server names it."""
DEFAULT_AGENT_IDENTITIES = ("system:serviceaccount:kube-system:gpupool-agent",)
"""The ServiceAccount of deploy/agent-daemonset.yaml, as the API server names it."""

DENIAL = "gpupool.io/allocation is written only by the gpupool scheduler"
"""How the policy's refusal begins (its ``messageExpression``): a 403 that says this is the
policy's, not RBAC's (the control plane tells the two apart to say what to fix)."""
DENIED_USER_SUFFIX = " may not set, change or remove it"
"""How the refusal ends, after the user it refused."""

POD_MANIFEST = "allocation-writers.yaml"
CLAIM_MANIFEST = "claim-allocation-writers.yaml"
"""The same rule for ResourceClaims: only the scheduler allocates gpupool's devices and writes
``gpupool.io/claim-allocation`` (:mod:`gpupool.kube.objects.dra.claim_record`)."""
QUEUE_CLASS_MANIFEST = "queue-classes.yaml"
"""A pod's ``gpupool.io/class`` must be one the GPUQueues serving its namespace allow. It takes
GPUQueues as parameters, so it is installed once their definition is served."""
QUEUE_CLASS_POLICY_NAME = "gpupool-queue-classes"
DECLARED_RUNTIME_MANIFEST = "declared-runtime.yaml"
"""No update sets, changes or removes a pod's declared runtime, nor a bound pod's queue or class
label (no identity to fill in)."""
DECLARED_RUNTIME_POLICY_NAME = "gpupool-declared-runtime"


def _shipped(manifest: str) -> list[dict[str, Any]]:
    text = (resources.files("gpupool.kube.install") / "manifests" / manifest).read_text("utf-8")
    return [document for document in yaml.safe_load_all(text) if document]


def queue_class_manifests() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy on pods' classes and its binding (no identity to fill in)."""
    return _shipped(QUEUE_CLASS_MANIFEST)


def declared_runtime_manifests() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy that fixes a pod's declared runtime, and its binding."""
    return _shipped(DECLARED_RUNTIME_MANIFEST)


def _literal(value: str, option: str) -> str:
    """``value`` as a CEL string literal, refusing what cannot be written safely.

    Raises:
        ValueError: Empty, or holds a quote, a backslash or a control character; the message
            names ``option``.
    """
    if not value or any(c in value for c in "\"'\\") or not value.isprintable():
        raise ValueError(
            f"{option}: {value!r} must be a non-empty name without quotes, backslashes or "
            "control characters"
        )
    return json.dumps(value)


def check_identities(identities: Sequence[str], option: str = "--scheduler-identity") -> None:
    """Refuse identities that cannot be written safely into a CEL string literal.

    Raises:
        ValueError: No identity, or one that is empty or holds a quote, a backslash or a
            control character; the message names ``option``.
    """
    if not identities:
        raise ValueError(f"{option}: at least one identity is needed")
    for identity in identities:
        _literal(identity, option)


def match_expression(identities: Sequence[str], option: str = "--scheduler-identity") -> str:
    """The CEL match condition: the request does not come from one of ``identities``."""
    check_identities(identities, option)
    return f"!(request.userInfo.username in {json.dumps(list(identities))})"


def _with_condition(manifest: str, name: str, expression: str) -> list[dict[str, Any]]:
    policy, binding = (copy.deepcopy(document) for document in _shipped(manifest))
    (condition,) = [c for c in policy["spec"]["matchConditions"] if c["name"] == name]
    condition["expression"] = expression
    return [policy, binding]


def policy_manifests(
    identities: Sequence[str] = DEFAULT_SCHEDULER_IDENTITIES, manifest: str = POD_MANIFEST
) -> list[dict[str, Any]]:
    """The allocation writers' policy and its binding, allowing exactly ``identities``.

    ``manifest`` is the pods' policy by default, :data:`CLAIM_MANIFEST` for claims.

    Raises:
        ValueError: A bad identity (see :func:`check_identities`).
    """
    return _with_condition(manifest, "not-a-scheduler", match_expression(identities))


def bypass_policy_manifests(
    identities: Sequence[str] = DEFAULT_SCHEDULER_IDENTITIES, scheduler_name: str = "gpupool"
) -> list[dict[str, Any]]:
    """The policy refusing pods created on a node past the scheduler, and its binding.

    Raises:
        ValueError: A bad identity or scheduler name.
    """
    policy, binding = _with_condition(
        "placed-by-scheduler.yaml", "not-a-scheduler", match_expression(identities)
    )
    (named,) = [v for v in policy["spec"]["variables"] if v["name"] == "forGpupool"]
    literal = _literal(scheduler_name, "--scheduler-name").replace('"', "'")
    named["expression"] = (
        f"has(object.spec.schedulerName) && object.spec.schedulerName == {literal}"
    )
    return [policy, binding]


def agent_policy_manifests(
    identities: Sequence[str] = DEFAULT_AGENT_IDENTITIES,
) -> list[dict[str, Any]]:
    """The policy keeping each agent to its own Node, and its binding.

    Raises:
        ValueError: A bad identity (the message names ``--agent-identity``).
    """
    check_identities(identities, "--agent-identity")
    expression = f"request.userInfo.username in {json.dumps(list(identities))}"
    return _with_condition("agent-own-node.yaml", "an-agent", expression)
