"""Allocation records signed by the scheduler, so that "made by the scheduler" can be checked.

A record's fields can all be checked against its pod (node, GPU count, shares), but a record
that is consistent with its pod is not thereby the scheduler's: an administrator, or anyone the
admission policy fails to stop, can bind a pod with ``spec.nodeName`` and a hand-written record
naming GPUs that another pod already holds. If the scheduler then trusted both records, which
pod kept the GPU would depend on the order events arrived in (dict order on a rebuild), and a
GPU could be given twice; if the node agent trusted it, a container would run on GPUs nobody
gave it.

So every record carries ``sig``, an Ed25519 signature over the pod's uid and the record's other
fields. The private key stays in a Secret only the scheduler's Role reads; the public key is
published in a ConfigMap the node agents read. An asymmetric signature is what lets the agent
check: with the HMAC this module used before, verifying needed the same key as signing, so
every node able to verify would also have been able to forge records for the whole cluster.
A record whose signature checks is the scheduler's own decision for exactly this pod: copying
it onto another pod, or editing any field, breaks it.

Migration: records signed with the retired HMAC scheme (a bare hex ``sig``) do not verify; their
pods are held as foreign pods until they end, and the agent refuses to start (or restart) their
containers. :func:`retired_scheme` lets the messages say so.

The private key is never logged or written anywhere but its Secret. Rotating it turns every
running pod's record into a foreign one until it ends (safe, but it loses the exact GPU choice),
so it is not rotated automatically.
"""

from __future__ import annotations

import base64
import binascii
from typing import Protocol, TypeVar

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

KEY_SECRET_NAME = "gpupool-allocation-key"
"""Name of the Secret holding the private key (in the scheduler's namespace, the Lease's)."""
PUBLIC_KEY_CONFIGMAP = "gpupool-allocation-key"
"""Name of the ConfigMap publishing the public key (same namespace; the agents read it)."""
PRIVATE_KEY_FIELD = "ed25519.pem"
"""The Secret's data key: the private key, PKCS#8 PEM."""
PUBLIC_KEY_FIELD = "ed25519.pub.pem"
"""The ConfigMap's data key: the public key, SubjectPublicKeyInfo PEM."""
SIG_PREFIX = "ed25519:"
_DOMAIN = b"gpupool.io/allocation/v2\x00"
CLAIM_DOMAIN = b"gpupool.io/claim-allocation/v2\x00"
"""The domain of claim records (:mod:`gpupool.kube.objects.dra.claim_record`): a pod's signature
can never pass for a claim's, even for equal uids and fields."""
_SIGNATURE_BYTES = 64
_RETIRED_HMAC_HEX = 64


class KeyFormatError(ValueError):
    """A key cannot be read; the message says which object and field."""


class Signed(Protocol):
    """A msgspec record with a ``sig`` field (a pod's or a claim's allocation record)."""

    @property
    def sig(self) -> str:
        """The signature (empty when unsigned)."""


Record = TypeVar("Record", bound=Signed)


def signed_bytes(record: Signed, uid: str, domain: bytes = _DOMAIN) -> bytes:
    """What is signed: a domain tag, the object's uid and the record without its ``sig``."""
    unsigned = msgspec.structs.replace(record, sig="")  # type: ignore[type-var]
    return domain + uid.encode() + b"\x00" + msgspec.json.encode(unsigned)


def retired_scheme(sig: str) -> bool:
    """Whether ``sig`` looks like a signature of the retired HMAC-SHA256 scheme (64 hex)."""
    return len(sig) == _RETIRED_HMAC_HEX and all(c in "0123456789abcdef" for c in sig)


class RecordVerifier:
    """Verifies allocation records with the scheduler's public key.

    Args:
        public_key: The scheduler's Ed25519 public key.
        domain: What kind of record (pod records by default; :data:`CLAIM_DOMAIN`).
    """

    def __init__(self, public_key: Ed25519PublicKey, domain: bytes = _DOMAIN) -> None:
        self._public = public_key
        self._domain = domain

    @classmethod
    def from_public_pem(cls, pem: bytes, where: str = "public key") -> RecordVerifier:
        """From a SubjectPublicKeyInfo PEM.

        Raises:
            KeyFormatError: Not PEM, or not an Ed25519 key; the message starts with ``where``.
        """
        try:
            key = serialization.load_pem_public_key(pem)
        except ValueError as error:
            raise KeyFormatError(f"{where}: not a PEM public key ({error})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFormatError(f"{where}: not an Ed25519 key")
        return cls(key)

    def for_domain(self, domain: bytes) -> RecordVerifier:
        """The same key for another kind of record (claims: :data:`CLAIM_DOMAIN`)."""
        return RecordVerifier(self._public, domain)

    def public_pem(self) -> bytes:
        """The public key as SubjectPublicKeyInfo PEM (what the ConfigMap holds)."""
        return self._public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def verify(self, record: Signed, uid: str) -> bool:
        """Whether ``record`` was signed by the scheduler for exactly this object (pod, claim)."""
        if not record.sig.startswith(SIG_PREFIX):
            return False
        text = record.sig.removeprefix(SIG_PREFIX)
        try:
            signature = base64.b64decode(text + "=" * (-len(text) % 4), b"-_", validate=True)
        except binascii.Error:
            return False
        if len(signature) != _SIGNATURE_BYTES:
            return False
        try:
            self._public.verify(signature, signed_bytes(record, uid, self._domain))
        except InvalidSignature:
            return False
        return True


class RecordSigner(RecordVerifier):
    """Signs allocation records (the scheduler) and verifies them.

    Args:
        private_key: The scheduler's Ed25519 private key.
        domain: What kind of record (pod records by default; :data:`CLAIM_DOMAIN`).
    """

    def __init__(self, private_key: Ed25519PrivateKey, domain: bytes = _DOMAIN) -> None:
        super().__init__(private_key.public_key(), domain)
        self._private = private_key

    def for_domain(self, domain: bytes) -> RecordSigner:
        """The same key for another kind of record (claims: :data:`CLAIM_DOMAIN`)."""
        return RecordSigner(self._private, domain)

    @classmethod
    def generate(cls) -> RecordSigner:
        """A signer with a fresh random key."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_private_pem(cls, pem: bytes, where: str = "private key") -> RecordSigner:
        """From a PKCS#8 PEM without a password.

        Raises:
            KeyFormatError: Not PEM, encrypted, or not an Ed25519 key; the message starts with
                ``where``.
        """
        try:
            key = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as error:
            raise KeyFormatError(f"{where}: not an unencrypted PEM private key ({error})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFormatError(f"{where}: not an Ed25519 key")
        return cls(key)

    def private_pem(self) -> bytes:
        """The private key as PKCS#8 PEM (what the Secret holds)."""
        return self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def sign(self, record: Record, uid: str) -> Record:
        """``record`` with its signature for the object (pod or claim) ``uid``."""
        signature = self._private.sign(signed_bytes(record, uid, self._domain))
        text = base64.urlsafe_b64encode(signature).rstrip(b"=").decode()
        return msgspec.structs.replace(record, sig=SIG_PREFIX + text)  # type: ignore[type-var]
