"""May this control plane write allocations? Found out once at start, then kept up to date.

The admission policy (:mod:`gpupool.kube.install.admission_policy`) lets only the scheduler
identities write ``gpupool.io/allocation``. A control plane started as anyone else (a new
user's first try is the admin kubeconfig) decides placements that the API server then refuses,
one 403 per bind, for ever, while it reports itself Ready. So it asks first: a dry-run Binding
carrying an allocation, for a pod that does not exist. Admission runs before the Binding looks
for its pod, so the policy's refusal (403, :data:`~gpupool.kube.install.admission_policy.DENIAL`)
means "not allowed", and a 404 means "allowed" (or no policy installed); nothing is written
either way. The answer is checked again every :data:`PROBE_PERIOD` seconds, so a fix (the right
ServiceAccount, or ``install-crds --scheduler-identity``) takes effect without a restart, and a
bind refused by the policy in between says the same at once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx2

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.install.admission_policy import DENIAL, DENIED_USER_SUFFIX, POLICY_NAME
from gpupool.kube.objects.vocabulary import ANNOTATION_ALLOCATION

log = logging.getLogger(__name__)

PROBE_POD = "gpupool-allocation-rights-probe"
"""The pod the probe Binding names; it never exists (a dry run could not create it anyway)."""
PROBE_PERIOD = 30.0


def is_policy_denial(message: str) -> bool:
    """Whether an API server refusal is the allocation policy's."""
    return DENIAL in message


def denial_reason(message: str) -> str:
    """What ``/readyz`` and the log say about a refusal by the policy: who, and the fix."""
    user = message.rsplit(": ", 1)[-1].removesuffix(DENIED_USER_SUFFIX) if message else ""
    who = user or "this identity"
    return (
        f"the admission policy {POLICY_NAME} does not let {who} write {ANNOTATION_ALLOCATION}, "
        "so every bind would be refused. Run the control plane as the scheduler's "
        "ServiceAccount (the chart's gpupool-scheduler), or list this identity: gpupool "
        f"install-crds --scheduler-identity {who} (with every identity that should keep it)"
    )


@dataclass
class AllocationRights:
    """Whether the policy lets this replica write allocations ("" in ``denied``: yes, or unknown).

    Changes are logged once each way, never once per bind.
    """

    denied: str = ""

    def refused(self, message: str) -> None:
        """The policy refused us (the probe, or a bind)."""
        reason = denial_reason(message)
        if reason != self.denied:
            log.error("not ready: %s", reason)
        self.denied = reason

    def allowed(self) -> None:
        """The policy lets us write (or there is none)."""
        if self.denied:
            log.warning("allocation writes allowed again; ready")
        self.denied = ""


async def probe(api: KubeAPI, namespace: str, rights: AllocationRights) -> None:
    """Ask the API server, with a dry run, whether this identity may write an allocation.

    Any other answer (RBAC, a server error, no connection) leaves ``rights`` as it was: only
    the policy's own refusal, or the missing pod behind it, says anything.
    """
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": PROBE_POD, "annotations": {ANNOTATION_ALLOCATION: "{}"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": PROBE_POD},
    }
    path = f"/api/v1/namespaces/{namespace}/pods/{PROBE_POD}/binding"
    try:
        await api.request("POST", path, body=body, params={"dryRun": "All"})
    except ApiError as error:
        if error.status == 403 and is_policy_denial(error.message):
            rights.refused(error.message)
        elif error.status == 404:
            rights.allowed()
        else:
            log.debug("allocation rights probe: %s", error)
    except (OSError, httpx2.HTTPError) as error:
        log.debug("allocation rights probe: %s", error)
    else:
        rights.allowed()  # cannot happen for a pod that does not exist; admission passed
