"""Ed25519 allocation signatures: made by the private key, checked with the public key alone."""

from __future__ import annotations

import msgspec
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpupool.kube.objects.allocation import AllocationRecord, GpuShare, encode
from gpupool.kube.objects.record_check import signature_problem
from gpupool.kube.objects.records import ObjectMeta, PodRecord
from gpupool.kube.objects.signing import (
    CLAIM_DOMAIN,
    SIG_PREFIX,
    KeyFormatError,
    RecordSigner,
    RecordVerifier,
    retired_scheme,
)
from gpupool.kube.objects.vocabulary import ANNOTATION_ALLOCATION

SIGNER = RecordSigner.generate()
RECORD = AllocationRecord(
    node="n1", kind="share", gpus=(GpuShare(0, "GPU-0", 250, 4096),), pool="p", queue="q"
)


def test_the_public_key_alone_verifies_what_the_private_key_signed() -> None:
    signed = SIGNER.sign(RECORD, "uid-1")
    assert signed.sig.startswith(SIG_PREFIX)
    public_only = RecordVerifier.from_public_pem(SIGNER.public_pem())
    assert public_only.verify(signed, "uid-1")
    assert not hasattr(public_only, "sign")
    again = RecordSigner.from_private_pem(SIGNER.private_pem())
    assert again.verify(signed, "uid-1")
    assert again.sign(RECORD, "uid-1").sig == signed.sig  # Ed25519 is deterministic


@pytest.mark.parametrize(
    "change",
    [
        {"node": "n2"},
        {"gpus": (GpuShare(1, "GPU-1", 250, 4096),)},
        {"gpus": (GpuShare(0, "GPU-0", 1000, 4096),)},
        {"queue": "other"},
        {"scheduler": "me"},
    ],
)
def test_any_edit_breaks_the_signature(change: dict[str, object]) -> None:
    signed = SIGNER.sign(RECORD, "uid-1")
    assert not SIGNER.verify(msgspec.structs.replace(signed, **change), "uid-1")


def test_a_record_copied_to_another_pod_or_signed_by_another_key_fails() -> None:
    signed = SIGNER.sign(RECORD, "uid-1")
    assert not SIGNER.verify(signed, "uid-2")
    assert not SIGNER.verify(RecordSigner.generate().sign(RECORD, "uid-1"), "uid-1")


@pytest.mark.parametrize(
    "sig",
    [
        "",
        "ab" * 32,  # the retired HMAC scheme's hex
        SIG_PREFIX,
        SIG_PREFIX + "not base64!",
        SIG_PREFIX + "AAAA",  # three bytes
        "rsa:" + SIGNER.sign(RECORD, "uid-1").sig.removeprefix(SIG_PREFIX),
    ],
)
def test_malformed_signatures_are_not_valid(sig: str) -> None:
    assert not SIGNER.verify(msgspec.structs.replace(RECORD, sig=sig), "uid-1")


def test_the_retired_scheme_is_recognised_for_messages() -> None:
    assert retired_scheme("0123456789abcdef" * 4)
    assert not retired_scheme(SIGNER.sign(RECORD, "u").sig)
    assert not retired_scheme("")


def test_keys_that_are_not_ed25519_are_refused_naming_where() -> None:
    ec_key = ec.generate_private_key(ec.SECP256R1())
    pem = ec_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(KeyFormatError, match=r"^secret x: not an Ed25519 key"):
        RecordSigner.from_private_pem(pem, "secret x")
    public = ec_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(KeyFormatError, match=r"^configmap y: not an Ed25519 key"):
        RecordVerifier.from_public_pem(public, "configmap y")
    with pytest.raises(KeyFormatError, match=r"^configmap y: not a PEM public key"):
        RecordVerifier.from_public_pem(b"garbage", "configmap y")
    with pytest.raises(KeyFormatError, match=r"^secret x: not an unencrypted PEM private key"):
        RecordSigner.from_private_pem(b"garbage", "secret x")


def _pod(annotation: str | None, uid: str = "uid-1") -> PodRecord:
    annotations = {} if annotation is None else {ANNOTATION_ALLOCATION: annotation}
    return PodRecord(
        metadata=ObjectMeta(name="p", namespace="ns", uid=uid, annotations=annotations)
    )


def test_signature_problem_names_the_field_and_the_retired_scheme() -> None:
    verifier = RecordVerifier.from_public_pem(SIGNER.public_pem())
    good = encode(SIGNER.sign(RECORD, "uid-1"))
    assert signature_problem(_pod(good), verifier) is None
    problem = signature_problem(_pod(good, uid="uid-2"), verifier)
    assert problem == (
        "gpupool.io/allocation.sig: not signed by this cluster's gpupool scheduler for this pod"
    )
    retired = signature_problem(
        _pod(encode(msgspec.structs.replace(RECORD, sig="cd" * 32))), verifier
    )
    assert retired is not None
    assert retired.endswith("(signed with the retired HMAC scheme: recreate the pod)")
    # no record, or one that is not JSON: the agent's own checks name those faults
    assert signature_problem(_pod(None), verifier) is None
    assert signature_problem(_pod("{not json"), verifier) is None


def test_a_pods_signature_never_passes_for_a_claims() -> None:
    claims = SIGNER.for_domain(CLAIM_DOMAIN)
    pod_signed = SIGNER.sign(RECORD, "uid-1")
    assert not claims.verify(pod_signed, "uid-1")
    claim_signed = claims.sign(RECORD, "uid-1")
    assert claims.verify(claim_signed, "uid-1")
    assert not SIGNER.verify(claim_signed, "uid-1")
    public = RecordVerifier.from_public_pem(SIGNER.public_pem())
    assert public.verify(pod_signed, "uid-1")
