"""Certificates for a throw-away control plane: one CA, a serving cert, a client cert, an SA key.

The API server needs TLS and a client-certificate authority; service-account tokens need a key
pair. Everything is generated per cluster (EC P-256 keys are fast to make) and written into the
cluster's folder, so no two clusters, and no two test runs, share secrets.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=2)


@dataclass(frozen=True, slots=True)
class ClusterCerts:
    """Paths of the files :func:`write_cluster_certs` wrote."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public: Path
    sa_private: Path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    usage: x509.ObjectIdentifier | None,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    issuer_name, issuer_key = issuer if issuer else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def write_cluster_certs(directory: Path) -> ClusterCerts:
    """Generate and write every certificate and key one local control plane needs."""
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("gpupool-dev-ca")
    ca = _issue(ca_name, ca_key, None, None)
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca.public_bytes(pem))
    _write_key(ca_key, directory / "ca.key")

    serving_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes.default.svc"),
    ]
    serving = _issue(
        _name("kube-apiserver"),
        serving_key,
        (ca_name, ca_key),
        ExtendedKeyUsageOID.SERVER_AUTH,
        sans,
    )
    (directory / "apiserver.crt").write_bytes(serving.public_bytes(pem))
    _write_key(serving_key, directory / "apiserver.key")

    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = _issue(
        _name("gpupool-admin", "system:masters"),
        admin_key,
        (ca_name, ca_key),
        ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    (directory / "admin.crt").write_bytes(admin.public_bytes(pem))
    _write_key(admin_key, directory / "admin.key")

    sa_key = ec.generate_private_key(ec.SECP256R1())
    _write_key(sa_key, directory / "sa.key")
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return ClusterCerts(
        ca_cert=ca_path,
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_public=directory / "sa.pub",
        sa_private=directory / "sa.key",
    )
