"""The control plane's HTTP side: whether it may speak plain HTTP, its certificate, its face.

Kept apart from the command's options because each answer guards a token: the REST API carries
bearer tokens, so plain HTTP is allowed only on loopback, and the face (which needs the ``face``
extra) is built only once the certificate and audience are known.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpupool.cli.options import fail

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine
    from starlette.types import ASGIApp

    from gpupool.kube.client.api import KubeAPI
    from gpupool.kube.client.serving_tls import ReloadingCertificate
    from gpupool.kube.scheduler.live import LiveScheduler

FaceFactory = Callable[["LiveScheduler", "KubeAPI", "AsyncEngine | None"], "ASGIApp"]
"""Builds the REST API and dashboard of a replica from its scheduler, API client and store."""


def loopback(address: tuple[str, int] | None) -> bool:
    """Whether the HTTP server listens on loopback only (or not at all)."""
    import ipaddress

    if address is None:
        return True
    try:
        return ipaddress.ip_address(address[0]).is_loopback
    except ValueError:
        return address[0] == "localhost"


def serving_tls(
    address: tuple[str, int] | None, cert: Path | None, key: Path | None, api: bool
) -> ReloadingCertificate | None:
    """The serving certificate, or None for plain HTTP where that carries no token off-host."""
    from gpupool.kube.client.serving_tls import CertificateError, ReloadingCertificate

    if (cert is None) != (key is None):
        raise fail("--tls-cert/--tls-key: give both or neither")
    if cert is not None and key is not None:
        try:
            return ReloadingCertificate(cert, key)
        except CertificateError as error:
            raise fail(str(error)) from None
    if api and address is not None and not loopback(address):
        raise fail(
            f"--http-address: {address[0]} is not loopback, and the REST API carries bearer "
            "tokens: give --tls-cert and --tls-key, listen on 127.0.0.1, or pass --no-api"
        )
    return None


def face_builder(audience: str, insecure_local: bool) -> FaceFactory:
    """Builds the REST API and dashboard for a replica (the ``face`` extra)."""
    try:
        from gpupool.api.app import live_face
        from gpupool.api.store_records import StoreRecords
        from gpupool.kube.scheduler.read_view import SchedulerReader
    except ImportError as error:
        raise fail(
            f"--api: the REST API needs the face extra (pip install 'gpupool[face]'), "
            f"or pass --no-api: {error}"
        ) from None
    if not audience:
        raise fail("--api-audience: must not be empty")

    def face(scheduler: LiveScheduler, api: KubeAPI, engine: AsyncEngine | None) -> ASGIApp:
        records = StoreRecords(engine) if engine is not None else None
        reader = SchedulerReader(scheduler)
        return live_face(reader, api, records, insecure_local=insecure_local, audience=audience)

    return face
