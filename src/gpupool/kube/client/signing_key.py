"""The allocation key pair: the private key in a Secret, the public key in a ConfigMap.

The signature itself (:mod:`gpupool.kube.objects.signing`) is pure; reading and publishing the
keys is the only part that talks to the API server, so it lives here with the client.

* The private key is the Secret ``gpupool-allocation-key`` in the scheduler's namespace, created
  by the first replica that needs it, or by whoever installs gpupool (the Helm chart): then the
  replicas only read it (``create=False``), since a replica starting while ``helm uninstall``
  runs would otherwise make the pair again, outside the release, and block the next install.
  Only the scheduler's Role may read it (``kube/install/manifests/scheduler-role.yaml``):
  whoever reads it can forge records.
* The public key is the ConfigMap of the same name, written by every replica at start from the
  private key it holds (so a ConfigMap someone replaced is put back by the next replica), and
  read by the node agents (their Role may read nothing else there). The scheduler never reads
  it back: it verifies with the key it derived itself.

A Secret from before the Ed25519 scheme (``data.key``, an HMAC key) is replaced by a new key
pair; records signed with it become foreign (docs/architecture.md, "Who can write the
allocation").
"""

from __future__ import annotations

import base64
import logging
from typing import Any

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.objects.signing import (
    KEY_SECRET_NAME,
    PRIVATE_KEY_FIELD,
    PUBLIC_KEY_CONFIGMAP,
    PUBLIC_KEY_FIELD,
    KeyFormatError,
    RecordSigner,
    RecordVerifier,
)

log = logging.getLogger(__name__)


def _secret(namespace: str, name: str, signer: RecordSigner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": {PRIVATE_KEY_FIELD: base64.b64encode(signer.private_pem()).decode()},
    }


def _private_key_of(secret: dict[str, Any], namespace: str, name: str) -> RecordSigner | None:
    """The signer in ``secret``, or None for a Secret of the retired HMAC scheme."""
    where = f"secret {namespace}/{name}: data.{PRIVATE_KEY_FIELD}"
    data = secret.get("data")
    encoded = data.get(PRIVATE_KEY_FIELD) if isinstance(data, dict) else None
    if encoded is None:
        return None
    if not isinstance(encoded, str):
        raise KeyFormatError(f"{where}: not a string")
    try:
        pem = base64.b64decode(encoded, validate=True)
    except ValueError:
        raise KeyFormatError(f"{where}: not base64") from None
    return RecordSigner.from_private_pem(pem, where)


class SigningKeyMissingError(ApiError):
    """The installer's key pair is not there (yet, or any more); the replica waits for it."""


async def _read_or_create(
    api: KubeAPI, namespace: str, name: str, create: bool = True
) -> RecordSigner:
    path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
    try:
        existing = await api.get(path)
    except ApiError as error:
        if error.status != 404:
            raise
        if not create:
            raise SigningKeyMissingError(
                404, "NotFound", f"secret {namespace}/{name} (made by the installer) not found"
            ) from None
        existing = None
    if existing is not None:
        signer = _private_key_of(existing, namespace, name)
        if signer is not None:
            return signer
        log.warning(
            "secret %s/%s holds a key of the retired HMAC scheme: replacing it with an Ed25519 "
            "key pair; records signed before become foreign",
            namespace,
            name,
        )
        signer = RecordSigner.generate()
        body = _secret(namespace, name, signer)
        body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        try:
            await api.replace(path, body)
            return signer
        except ApiError as error:
            if error.status != 409:  # another replica replaced it first: read its key
                raise
        return await _read_or_create(api, namespace, name, create)
    signer = RecordSigner.generate()
    try:
        await api.create(
            f"/api/v1/namespaces/{namespace}/secrets", _secret(namespace, name, signer)
        )
        log.info("created allocation signing key %s/%s", namespace, name)
        return signer
    except ApiError as error:
        if error.status != 409:
            raise
    # two replicas started together: the loser reads the winner's key, so all sign alike
    return await _read_or_create(api, namespace, name)


async def publish_public_key(
    api: KubeAPI,
    namespace: str,
    verifier: RecordVerifier,
    name: str = PUBLIC_KEY_CONFIGMAP,
    create: bool = True,
) -> None:
    """Create (unless ``create`` is off) or correct the ConfigMap holding ``verifier``'s key.

    Raises:
        SigningKeyMissingError: It is missing and ``create`` is off.
    """
    path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
    pem = verifier.public_pem().decode()
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {PUBLIC_KEY_FIELD: pem},
    }
    try:
        existing = await api.get(path)
    except ApiError as error:
        if error.status != 404:
            raise
        if not create:
            raise SigningKeyMissingError(
                404, "NotFound", f"configmap {namespace}/{name} (made by the installer) not found"
            ) from None
        try:
            await api.create(f"/api/v1/namespaces/{namespace}/configmaps", body)
            return
        except ApiError as create_error:
            if create_error.status != 409:
                raise
        existing = await api.get(path)
    if (existing.get("data") or {}).get(PUBLIC_KEY_FIELD) == pem:
        return
    if (existing.get("data") or {}).get(PUBLIC_KEY_FIELD) is not None:
        log.warning(
            "configmap %s/%s did not hold the scheduler's public key: corrected", namespace, name
        )
    # the stored object with only its data changed: the installer's labels and annotations
    # (Helm's ownership) stay, or the next helm install refuses the object as not its own
    await api.replace(
        path, {**existing, "data": {**(existing.get("data") or {}), PUBLIC_KEY_FIELD: pem}}
    )


async def load_signing_key(
    api: KubeAPI, namespace: str, name: str = KEY_SECRET_NAME, *, create: bool = True
) -> RecordSigner:
    """The scheduler's signer, its public key published; the key made if missing and ``create``.

    Raises:
        ApiError: The API server refused a read or write (:class:`SigningKeyMissingError`: the
            installer's Secret or ConfigMap is missing and ``create`` is off).
        KeyFormatError: The Secret holds something that is not an Ed25519 private key.
    """
    signer = await _read_or_create(api, namespace, name, create)
    await publish_public_key(api, namespace, signer, create=create)
    return signer


async def load_verifier(
    api: KubeAPI, namespace: str, name: str = PUBLIC_KEY_CONFIGMAP
) -> RecordVerifier:
    """The scheduler's public key, as the node agent reads it.

    Raises:
        ApiError: The API server refused the read (404: no scheduler has published it yet).
        KeyFormatError: The ConfigMap holds no readable Ed25519 public key.
    """
    config_map = await api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    pem = (config_map.get("data") or {}).get(PUBLIC_KEY_FIELD)
    where = f"configmap {namespace}/{name}: data.{PUBLIC_KEY_FIELD}"
    if not isinstance(pem, str):
        raise KeyFormatError(f"{where}: missing")
    return RecordVerifier.from_public_pem(pem.encode(), where)
