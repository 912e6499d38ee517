"""The MutatingWebhookConfiguration and ValidatingWebhookConfiguration that route pods here.

Generated from code, so the tests, the dev cluster and ``gpupool webhook install`` register the
webhook exactly alike. Choices that matter when the webhook is down:

* ``matchConditions`` (CEL, evaluated in the API server) send only pods that mention gpupool: a
  gpupool resource in a container, ``schedulerName: gpupool``, or the allocation annotation. A
  down webhook therefore never blocks unrelated pods, whatever the failure policy.
* A second condition sends an UPDATE only when it changes a field the webhook judges on
  update (:data:`JUDGED_ON_UPDATE`): a Job controller's finalizer edit, an unrelated label,
  an owner reference... is never sent, so a down webhook cannot block it (nor the
  deletion it finishes), while a change of a judged field still fails closed.
* ``failurePolicy: Fail`` (the default) fails closed: while no replica answers, pods that ask for
  gpupool resources are refused, so none escapes the checks or the routing. ``Ignore`` fails
  open: they are admitted unchecked and unrouted (they keep the default scheduler and may wait
  forever), and only the scheduler's own checks remain.
* Pods that name DRA claims (``spec.resourceClaims``) and mention gpupool nowhere else go to a
  second webhook of each configuration (``claims.*.gpupool.io``), on create only: whether their
  claims ask for gpupool's devices is read from the API server
  (:mod:`gpupool.webhook.claim_requests`). It always fails open, so a down webhook never blocks
  the DRA pods of other drivers; a gpupool claim pod admitted meanwhile keeps the default
  scheduler, which may not allocate gpupool's devices (``gpupool-claim-allocation-writers``),
  so it pends with that refusal and never runs outside its queue.
* The ``kube-system`` namespace and the webhook's own namespace are excluded, so the webhook can
  always be restarted, and ``sideEffects: None`` lets dry-run requests through.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass
from typing import Any, Literal

from gpupool.kube.client.api import ApiError, JsonObject, KubeAPI
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_ALLOCATION,
    LABEL_CLASS,
    LABEL_QUEUE,
    SCHEDULER_NAME,
)

ADMISSION_API = "/apis/admissionregistration.k8s.io/v1"
MUTATING = "mutatingwebhookconfigurations"
VALIDATING = "validatingwebhookconfigurations"
FailurePolicy = Literal["Fail", "Ignore"]
FAILURE_POLICIES: tuple[FailurePolicy, ...] = ("Fail", "Ignore")
JUDGED_ON_UPDATE: tuple[tuple[str, str], ...] = (
    ("annotations", ANNOTATION_ALLOCATION),
    ("labels", LABEL_QUEUE),
    ("labels", LABEL_CLASS),
)
"""The metadata entries (map, key) :func:`gpupool.webhook.admission.review_pod` judges on an
UPDATE; nothing else of a pod can change in an update in a way the webhook refuses (the
resources and ``spec.schedulerName`` are immutable once created)."""


@dataclass(frozen=True, slots=True)
class WebhookTarget:
    """Where the API server reaches the webhook: a URL, or a Service in the cluster.

    Attributes:
        url: ``https://host:port`` (no path), e.g. ``https://127.0.0.1:8443`` in tests.
        service_namespace: The Service's namespace (used when ``url`` is empty).
        service_name: The Service's name.
        service_port: The Service's port.
    """

    url: str = ""
    service_namespace: str = ""
    service_name: str = ""
    service_port: int = 443

    def __post_init__(self) -> None:
        if bool(self.url) == bool(self.service_name):
            raise ValueError("give either url or service_name (with service_namespace)")
        if self.url and not self.url.startswith("https://"):
            raise ValueError(f"url: must start with https://, got {self.url!r}")
        if self.service_name and not self.service_namespace:
            raise ValueError("service_namespace: needed with service_name")

    def client_config(self, path: str, ca_bundle: bytes | None) -> JsonObject:
        """The ``clientConfig`` of one webhook calling ``path`` (no ``caBundle`` if None)."""
        config: JsonObject = {}
        if ca_bundle is not None:
            config["caBundle"] = base64.b64encode(ca_bundle).decode()
        if self.url:
            config["url"] = self.url.rstrip("/") + path
        else:
            config["service"] = {
                "namespace": self.service_namespace,
                "name": self.service_name,
                "port": self.service_port,
                "path": path,
            }
        return config


def _asks(containers: str) -> str:
    def names(source: str) -> str:
        field = f"c.resources.{source}"
        return f"(has({field}) && {field}.exists(k, k.startsWith('gpupool.io/')))"

    return f"{containers}.exists(c, has(c.resources) && ({names('limits')} || {names('requests')}))"


def match_expression(scheduler_name: str = SCHEDULER_NAME) -> str:
    """CEL that is true for pods that mention gpupool (only those are sent to the webhook)."""
    allocation = f"'{ANNOTATION_ALLOCATION}'"
    return " || ".join(
        (
            f"(has(object.metadata.annotations) && {allocation} in object.metadata.annotations)",
            f"(oldObject != null && has(oldObject.metadata.annotations) && "
            f"{allocation} in oldObject.metadata.annotations)",
            f"(has(object.spec.schedulerName) && object.spec.schedulerName == '{scheduler_name}')",
            _asks("object.spec.containers"),
            f"(has(object.spec.initContainers) && {_asks('object.spec.initContainers')})",
        )
    )


def claims_expression(scheduler_name: str = SCHEDULER_NAME) -> str:
    """CEL that is true for pods naming DRA claims that :func:`match_expression` leaves out."""
    claims = "has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0"
    return f"{claims} && !({match_expression(scheduler_name)})"


def _entry(obj: str, field: str, key: str) -> str:
    """CEL for one metadata entry as a list: ``[value]``, or ``[]`` where it is absent."""
    path = f"{obj}.metadata.{field}"
    return f"(has({path}) && '{key}' in {path} ? [{path}['{key}']] : [])"


def update_expression() -> str:
    """CEL that is true for a CREATE, and for an UPDATE changing an entry the webhook judges.

    Absent and empty differ (``[]`` against ``['']``): adding an empty label is a change.
    """
    changes = " || ".join(
        f"{_entry('object', field, key)} != {_entry('oldObject', field, key)}"
        for field, key in JUDGED_ON_UPDATE
    )
    return f"request.operation != 'UPDATE' || {changes}"


def webhook_configurations(
    ca_bundle: bytes | None,
    target: WebhookTarget,
    *,
    inject_ca_from: str = "",
    name: str = "gpupool",
    failure_policy: FailurePolicy = "Fail",
    timeout_seconds: int = 5,
    webhook_namespace: str = "gpupool-system",
    scheduler_name: str = SCHEDULER_NAME,
) -> dict[str, JsonObject]:
    """Both configurations, by collection (``mutatingwebhookconfigurations``, ...).

    Args:
        ca_bundle: PEM of the CA that signed the webhook's serving certificate; None when
            cert-manager injects it (``inject_ca_from``).
        target: Where the webhook listens.
        inject_ca_from: ``namespace/certificate`` of a cert-manager Certificate whose CA
            cert-manager's CA injector writes into the configurations.
        name: The configurations' object name.
        failure_policy: ``Fail`` (closed, the default) or ``Ignore`` (open) when it is down.
        timeout_seconds: How long the API server waits for an answer (1..30).
        webhook_namespace: The webhook's own namespace, excluded with ``kube-system``.
        scheduler_name: gpupool's scheduler name (pods naming it are sent too).
    """
    if failure_policy not in FAILURE_POLICIES:
        raise ValueError(f"failure_policy: must be Fail or Ignore, got {failure_policy!r}")
    if not 1 <= timeout_seconds <= 30:
        raise ValueError(f"timeout_seconds: must be 1..30, got {timeout_seconds}")
    if ca_bundle is None and not inject_ca_from:
        raise ValueError("ca_bundle: needed unless cert-manager injects it (inject_ca_from)")

    def webhooks(kind: str, path: str) -> list[dict[str, Any]]:
        client = target.client_config(path, ca_bundle)
        namespaces = sorted({"kube-system", webhook_namespace})
        pods = _webhook(kind, client, failure_policy, timeout_seconds, namespaces, scheduler_name)
        claims = _claims_webhook(pods, scheduler_name)
        if kind == "mutate":
            return [pod | {"reinvocationPolicy": "IfNeeded"} for pod in (pods, claims)]
        return [pods, claims]

    metadata: JsonObject = {"name": name}
    if inject_ca_from:
        metadata["annotations"] = {"cert-manager.io/inject-ca-from": inject_ca_from}
    return {
        MUTATING: {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": metadata,
            "webhooks": webhooks("mutate", "/mutate"),
        },
        VALIDATING: {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": metadata,
            "webhooks": webhooks("validate", "/validate"),
        },
    }


def _claims_webhook(pods: dict[str, Any], scheduler_name: str) -> dict[str, Any]:
    """The webhook for claim pods: ``pods``'s, on create only, failing open (module docstring)."""
    claims = copy.deepcopy(pods)  # nothing shared: YAML would print shared objects as aliases
    (rule,) = claims["rules"]
    return claims | {
        "name": pods["name"].replace("pods.", "claims.", 1),
        "rules": [rule | {"operations": ["CREATE"]}],
        "failurePolicy": "Ignore",
        "matchConditions": [
            {"name": "names-claims-only", "expression": claims_expression(scheduler_name)}
        ],
    }


def _webhook(
    kind: str,
    client_config: JsonObject,
    failure_policy: FailurePolicy,
    timeout_seconds: int,
    excluded_namespaces: list[str],
    scheduler_name: str,
) -> dict[str, Any]:
    """One webhook: pod creates and updates outside ``excluded_namespaces`` naming gpupool."""
    return {
        "name": f"pods.{kind}.gpupool.io",
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ],
        "failurePolicy": failure_policy,
        "sideEffects": "None",
        "timeoutSeconds": timeout_seconds,
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": excluded_namespaces,
                }
            ]
        },
        "matchConditions": [
            {"name": "mentions-gpupool", "expression": match_expression(scheduler_name)},
            {"name": "judged-update", "expression": update_expression()},
        ],
    }


async def install_webhook(api: KubeAPI, configurations: dict[str, JsonObject]) -> None:
    """Create both configurations, or replace the ones already there."""
    for collection, body in configurations.items():
        path = f"{ADMISSION_API}/{collection}"
        name = body["metadata"]["name"]
        try:
            current = await api.get(f"{path}/{name}")
        except ApiError as error:
            if error.status != 404:
                raise
            await api.create(path, body)
            continue
        metadata = body["metadata"] | {"resourceVersion": current["metadata"]["resourceVersion"]}
        await api.replace(f"{path}/{name}", body | {"metadata": metadata})


async def uninstall_webhook(api: KubeAPI, name: str = "gpupool") -> None:
    """Delete both configurations (missing ones are fine)."""
    for collection in (MUTATING, VALIDATING):
        await api.delete(f"{ADMISSION_API}/{collection}/{name}")
