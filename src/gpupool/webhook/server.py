"""``gpupool webhook``: the admission app over TLS, and the caches behind it, in one process.

uvicorn serves the app with the certificate and key from files (a mounted Secret in a cluster),
read again whenever they change (:mod:`gpupool.kube.client.serving_tls`): a renewed certificate
is served from the next handshake on, without a restart, so the webhook never outlives its
certificate while ``failurePolicy: Fail`` refuses every gpupool pod it cannot review. On
SIGTERM it stops accepting, finishes the reviews in flight and returns; the caches are then
cancelled and the process exits 0. (uvicorn's own signal capture re-raises the signal once it
has shut down, which kills the process before its cleanup and exits with -15; it is replaced.)
The webhook is a Deployment of its own, apart from the scheduler, so a scheduler restart never
blocks pod creation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import uvicorn
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import KubeConfig

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.serving_tls import ReloadingCertificate
from gpupool.webhook.admission import DEFAULT_CONFIG, AdmissionConfig
from gpupool.webhook.app import create_app
from gpupool.webhook.cache import FactsCache
from gpupool.webhook.claim_requests import ClaimReader

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WebhookServerConfig:
    """Everything ``gpupool webhook`` needs.

    Attributes:
        tls_cert: PEM certificate the API server verifies (against the configurations' CA).
        tls_key: Its private key.
        kubeconfig: Where to read nodes and queues; None inside a pod (its service account).
        host: Address to listen on.
        port: Port to listen on.
        admission: The admission settings.
    """

    tls_cert: Path
    tls_key: Path
    kubeconfig: Path | None = None
    host: str = "0.0.0.0"
    port: int = 8443
    admission: AdmissionConfig = field(default=DEFAULT_CONFIG)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Signals are handled by :func:`serve`, which stops the server and then cleans up."""
        yield


def connect(kubeconfig: Path | None) -> KubeAPI:
    """An API client from ``kubeconfig``, or from the pod's service account when None."""
    if kubeconfig is not None:
        return KubeAPI.from_kubeconfig(kubeconfig)
    config = KubeConfig.from_service_account().get()
    if config is None:  # pragma: no cover - a service account config has one context
        raise ValueError("the service account gave no cluster configuration")
    params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(30.0), trust_env=False)
    return KubeAPI(httpx2.AsyncClient(**params.httpx_params(config)))


async def serve(config: WebhookServerConfig) -> int:
    """Serve until SIGTERM/SIGINT (exit 0), or until the caches fail for good (exit 1).

    Raises:
        CertificateError: The certificate and key cannot be loaded (before anything starts).
    """
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    tls = ReloadingCertificate(config.tls_cert, config.tls_key)
    api = connect(config.kubeconfig)
    cache = FactsCache(api)
    server = _Server(
        uvicorn.Config(
            create_app(cache.facts, config.admission, ClaimReader(api)),
            host=config.host,
            port=config.port,
            ssl_context_factory=lambda _config, _default: tls.context(),
            log_config=None,
            access_log=False,
        )
    )
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, setattr, server, "should_exit", True)
    caches = asyncio.create_task(cache.run())
    serving = asyncio.create_task(server.serve())
    try:
        done, _ = await asyncio.wait({caches, serving}, return_when=asyncio.FIRST_COMPLETED)
        if caches in done and not caches.cancelled() and caches.exception() is not None:
            log.error("caches stopped: %r", caches.exception())
            server.should_exit = True
            await serving
            return 1
        return 0
    finally:
        caches.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await caches
        await api.close()
