"""Certificates for a throw-away control plane: one CA, a serving cert, a client cert, an SA key.

The API server needs TLS and a client-certificate authority; service-account tokens need a key
pair. Everything is generated per cluster (EC P-256 keys are fast to make) and written into the
cluster's folder, so no two clusters, and no two test runs, share secrets.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
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

    admin_cert, admin_key = write_client_cert(directory, "gpupool-admin", "system:masters")

    sa_key = ec.generate_private_key(ec.SECP256R1())
    _write_key(sa_key, directory / "sa.key")
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return ClusterCerts(
        ca_cert=ca_path,
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=admin_cert,
        admin_key=admin_key,
        sa_public=directory / "sa.pub",
        sa_private=directory / "sa.key",
    )


def write_client_cert(directory: Path, user: str, group: str | None = None) -> tuple[Path, Path]:
    """Issue a client certificate for ``user`` (in ``group``) from the cluster's CA.

    The API server maps the common name to the user name and the organisation to a group, so
    this is how tests act as a component with only the permissions its RBAC role grants.
    """
    pem = serialization.Encoding.PEM
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(_name(user, group), key, _load_ca(directory), ExtendedKeyUsageOID.CLIENT_AUTH)
    stem = "admin" if group == "system:masters" else user
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(pem))
    _write_key(key, key_path)
    return cert_path, key_path


def _load_ca(directory: Path) -> tuple[x509.Name, ec.EllipticCurvePrivateKey]:
    ca = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{directory / 'ca.key'}: not an EC key")
    return ca.subject, ca_key


def write_serving_cert(directory: Path, name: str, hosts: list[str]) -> tuple[Path, Path]:
    """Issue a serving certificate for ``hosts`` (IP addresses or DNS names) from the CA.

    For a server the API server calls, such as the admission webhook at
    ``https://127.0.0.1:<port>``: the webhook configuration's ``caBundle`` is the CA's
    ``ca.crt``. Returns the certificate's and the key's paths (``<name>.crt``, ``<name>.key``).
    """
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(_name(name), key, _load_ca(directory), ExtendedKeyUsageOID.SERVER_AUTH, sans)
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, key_path)
    return cert_path, key_path


class SecretVolume:
    """A folder laid out as a kubelet mounts a Secret, updated as the kubelet updates it.

    For tests of what reads a mounted Secret (the certificates gpupool serves with): the real
    layout, so a reader that opens the files once, or follows the symlinks wrongly, fails here.

    The files are symlinks ``NAME -> ..data/NAME``; ``..data`` is a symlink to a timestamped
    folder, and an update writes a new folder and renames a new ``..data`` over the old one, so
    a reader sees the old set or the new set, never a mix (AtomicWriter in the kubelet).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.version = 0

    def path(self, name: str) -> Path:
        """Where a reader of the Secret opens ``name``."""
        return self.folder / name

    def write(self, files: dict[str, bytes]) -> None:
        """Publish ``files`` at once, as a Secret update does."""
        self.version += 1
        fresh = self.folder / f"..{self.version:04d}"
        fresh.mkdir()
        for name, content in files.items():
            (fresh / name).write_bytes(content)
        staged = self.folder / "..data_tmp"
        staged.symlink_to(fresh.name)
        os.replace(staged, self.folder / "..data")
        for name in files:
            link = self.folder / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")
