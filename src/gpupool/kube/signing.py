"""Allocation records signed by the scheduler, so that "made by the scheduler" can be checked.

A record's fields can all be checked against its pod (node, GPU count, shares), but a record
that is consistent with its pod is not thereby the scheduler's: an administrator, or anyone the
admission policy fails to stop, can bind a pod with ``spec.nodeName`` and a hand-written record
naming GPUs that another pod already holds. If the scheduler then trusted both records, which
pod kept the GPU would depend on the order events arrived in (dict order on a rebuild), and a
GPU could be given twice.

So every record carries ``sig``, an HMAC-SHA256 over the pod's uid and the record's other
fields, keyed by a secret only the scheduler's replicas read (a Secret in the Lease's
namespace, created by the first replica that needs it). A record whose signature checks is the
scheduler's own decision for exactly this pod: copying it onto another pod, or editing any field,
breaks it. A signed record always wins over an unsigned one; pods with unsigned or invalid
records are held as foreign pods, never trusted and never left holding nothing.

The key is never logged or written anywhere else. Rotating it turns every running pod's record
into a foreign one until it ends (safe, but it loses the exact GPU choice), so it is not rotated
automatically.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets

import msgspec

from gpupool.kube.allocation import AllocationRecord
from gpupool.kube.api import ApiError, KubeAPI

log = logging.getLogger(__name__)

KEY_SECRET_NAME = "gpupool-allocation-key"
"""Name of the Secret holding the signing key (in the Lease's namespace)."""
KEY_FIELD = "key"
_DOMAIN = b"gpupool.io/allocation/v1\x00"
_KEY_BYTES = 32


class RecordSigner:
    """Signs and verifies allocation records for one cluster.

    Args:
        key: The secret key (at least 16 bytes).
    """

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("signing key: must be at least 16 bytes")
        self._key = key

    def _digest(self, record: AllocationRecord, pod_uid: str) -> str:
        unsigned = msgspec.structs.replace(record, sig="")
        message = _DOMAIN + pod_uid.encode() + b"\x00" + msgspec.json.encode(unsigned)
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def sign(self, record: AllocationRecord, pod_uid: str) -> AllocationRecord:
        """``record`` with its signature for the pod ``pod_uid``."""
        return msgspec.structs.replace(record, sig=self._digest(record, pod_uid))

    def verify(self, record: AllocationRecord, pod_uid: str) -> bool:
        """Whether ``record`` was signed with this key for exactly this pod."""
        return bool(record.sig) and hmac.compare_digest(record.sig, self._digest(record, pod_uid))


async def load_signing_key(api: KubeAPI, namespace: str, name: str = KEY_SECRET_NAME) -> bytes:
    """Read the cluster's signing key, creating it on first use.

    Two replicas starting together may both try to create it; the loser's create fails with 409
    and it reads the winner's key, so every replica signs with the same key.
    """
    path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
    try:
        return _key_from(await api.get(path), namespace, name)
    except ApiError as error:
        if error.status != 404:
            raise
    key = secrets.token_bytes(_KEY_BYTES)
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": {KEY_FIELD: base64.b64encode(key).decode()},
    }
    try:
        await api.create(f"/api/v1/namespaces/{namespace}/secrets", body)
        log.info("created allocation signing key %s/%s", namespace, name)
        return key
    except ApiError as error:
        if error.status != 409:
            raise
    return _key_from(await api.get(path), namespace, name)


def _key_from(secret: dict[str, object], namespace: str, name: str) -> bytes:
    data = secret.get("data")
    encoded = data.get(KEY_FIELD) if isinstance(data, dict) else None
    if not isinstance(encoded, str):
        raise ValueError(f"secret {namespace}/{name}: data.{KEY_FIELD} is missing")
    try:
        return base64.b64decode(encoded, validate=True)
    except ValueError:
        raise ValueError(f"secret {namespace}/{name}: data.{KEY_FIELD} is not base64") from None
