"""The scheduler's HTTP server: ``/healthz``, ``/readyz`` and ``/metrics``.

A small Starlette app on uvicorn, in the scheduler's own asyncio loop: a liveness answer then
proves that the loop that schedules is not stuck, which a server in a thread of its own would
not; and the REST API can later be mounted on the same app. uvicorn's own signal handling is
switched off (the service owns SIGTERM, and must release its Lease on it), and the socket is
bound before anything else starts, so a taken port fails the process at once with the address
named instead of leaving a replica that Kubernetes can never probe.

* ``/healthz``: 200 while the process and its loop run.
* ``/readyz``: 200 once both informer caches have synced, leader or standby (the body says
  which), 503 before: a standby with warm caches is ready to take over, which is what a
  PodDisruptionBudget needs to know.
* ``/metrics``: the process's own registry, in the format the scraper asks for.
* everything else: the face (the REST API and dashboard, :mod:`gpupool.api`) when one is
  given, mounted after the three routes above so that probes and scrapes never pass through its
  access control. It is passed in as a plain ASGI app because the API sits above this package.

With a certificate (:class:`~gpupool.kube.client.serving_tls.ReloadingCertificate`) everything
is served over TLS, the certificate read again when its files change; without one, plain HTTP,
which the command allows only on loopback or with no API (bearer tokens never cross a network
in the clear).
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable, Iterator

import uvicorn
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from gpupool.kube.client.serving_tls import ReloadingCertificate

log = logging.getLogger(__name__)

Readiness = Callable[[], tuple[bool, str]]
"""Returns (ready, what to say): ``(True, "leader")``, ``(False, "informer caches not synced")``."""


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9402`` for IPv6) as a pair.

    Raises:
        ValueError: Not ``host:port`` with a port in 0..65535; the message names the option.
    """
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--http-address: {text!r} is not host:port (e.g. 127.0.0.1:9402)")
    return host, int(port)


def build_app(
    registry: CollectorRegistry, readiness: Readiness, face: ASGIApp | None = None
) -> Starlette:
    """The ASGI app with the three endpoints, and ``face`` mounted at ``/`` when given."""

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> Response:
        ready, detail = readiness()
        if ready:
            return PlainTextResponse(f"ok: {detail}\n")
        return PlainTextResponse(f"not ready: {detail}\n", status_code=503)

    async def metrics(request: Request) -> Response:
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        # in the loop's thread: the collector reads the scheduler's dicts, which only this
        # thread changes
        return Response(encoder(registry), media_type=content_type)

    routes: list[BaseRoute] = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
    ]
    if face is not None:
        routes.append(Mount("/", app=face))
    return Starlette(routes=routes)


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: the service decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HttpServer:
    """The app on a socket bound at construction.

    Args:
        app: The ASGI app.
        host: Address to listen on.
        port: Port (0: any free one; :attr:`port` says which).
        tls: Serve HTTPS with this certificate; ``None``: plain HTTP.

    Raises:
        OSError: The address cannot be bound (in use, not local).
    """

    def __init__(
        self, app: Starlette, host: str, port: int, tls: ReloadingCertificate | None = None
    ) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host, port))
            self.socket.listen(128)  # the port is ours from here, not from serve()
        except OSError:
            self.socket.close()
            raise
        self.host = host
        self.port: int = self.socket.getsockname()[1]
        self.tls = tls
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            ssl_context_factory=(lambda _c, _d: tls.context()) if tls is not None else None,
        )
        self.server = _QuietServer(config)

    @property
    def url(self) -> str:
        """``http(s)://host:port`` of the bound socket."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host}:{self.port}"

    async def serve(self) -> None:
        """Serve until :meth:`stop`."""
        await self.server.serve(sockets=[self.socket])

    def stop(self) -> None:
        """Ask the server to finish (serve() returns once open requests are done)."""
        self.server.should_exit = True
