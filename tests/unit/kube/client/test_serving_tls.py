"""A renewed certificate is served from the next handshake on, without a restart.

Real TLS on loopback (asyncio's server with the context the webhook and the API give uvicorn),
certificates from a test CA, files laid out and swapped as a kubelet updates a mounted Secret.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from cryptography import x509

from gpupool.devcluster.certs import SecretVolume, write_cluster_certs, write_serving_cert
from gpupool.kube.client.serving_tls import CertificateError, ReloadingCertificate


def _pair(pki: Path, name: str) -> dict[str, bytes]:
    cert, key = write_serving_cert(pki, name, ["127.0.0.1"])
    return {"tls.crt": cert.read_bytes(), "tls.key": key.read_bytes()}


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    folder = tmp_path / "pki"
    write_cluster_certs(folder)
    return folder


@asynccontextmanager
async def tls_server(tls: ReloadingCertificate) -> AsyncIterator[int]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=tls.context())
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def served_name(port: int, ca: Path, sni: str | None = "127.0.0.1") -> str:
    """The common name of the certificate a new handshake gets (SNI or none, as Go sends)."""
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = sni is not None
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname=sni or ""
    )
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    assert await reader.read() == b"ok"
    writer.close()
    cert = x509.load_der_x509_certificate(der)
    return str(cert.subject.rfc4514_string())


async def test_a_swapped_secret_is_served_at_the_next_handshake(
    pki: Path, secret_volume: SecretVolume
) -> None:
    secret_volume.write(_pair(pki, "first"))
    tls = ReloadingCertificate(secret_volume.path("tls.crt"), secret_volume.path("tls.key"))
    async with tls_server(tls) as port:
        assert await served_name(port, pki / "ca.crt") == "CN=first"
        secret_volume.write(_pair(pki, "second"))
        assert await served_name(port, pki / "ca.crt") == "CN=second"
        assert await served_name(port, pki / "ca.crt", sni=None) == "CN=second"
        secret_volume.write(_pair(pki, "third"))
        assert await served_name(port, pki / "ca.crt", sni=None) == "CN=third"  # without SNI too
    assert tls.reloads == 2


async def test_files_written_one_after_the_other_never_fail_a_handshake(
    pki: Path, tmp_path: Path
) -> None:
    first, second = _pair(pki, "first"), _pair(pki, "second")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(first["tls.crt"])
    key.write_bytes(first["tls.key"])
    tls = ReloadingCertificate(cert, key)
    async with tls_server(tls) as port:
        cert.write_bytes(second["tls.crt"])  # the new certificate beside the old key
        assert await served_name(port, pki / "ca.crt") == "CN=first"
        key.write_bytes(second["tls.key"])
        assert await served_name(port, pki / "ca.crt") == "CN=second"
        cert.unlink()  # a file gone: keep serving what was read
        assert await served_name(port, pki / "ca.crt") == "CN=second"
    assert tls.reloads == 1


def test_a_bad_pair_at_start_names_the_files(pki: Path, tmp_path: Path) -> None:
    first, second = _pair(pki, "first"), _pair(pki, "second")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    with pytest.raises(CertificateError, match=r"^--tls-cert/--tls-key: .*tls\.crt: No such file"):
        ReloadingCertificate(cert, key)
    cert.write_bytes(first["tls.crt"])
    key.write_bytes(second["tls.key"])
    with pytest.raises(CertificateError, match="are not a certificate and its key"):
        ReloadingCertificate(cert, key)
