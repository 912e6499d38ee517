"""``gpupool control-plane``: one replica of the live scheduler, from kubeconfig to exit code.

It connects with a kubeconfig, or in a pod with its ServiceAccount
(:meth:`~gpupool.kube.api.KubeAPI.in_cluster`), and serves ``/healthz``, ``/readyz`` and
``/metrics`` (:mod:`gpupool.kube.http`, :mod:`gpupool.kube.metrics`) in the same loop.
Every replica keeps its informers running; the Lease decides which one schedules. A replica that
loses the Lease stops scheduling at once and campaigns again as a standby; when it next leads it
starts from a fresh relist with no assumptions left from its previous term. The process exits 0
on SIGTERM/SIGINT, after releasing the Lease so a standby takes over at once, and 1 if its
informers fail for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx2
from starlette.types import ASGIApp

from gpupool.kube.api import ApiError, KubeAPI
from gpupool.kube.governance import GovernanceConfig, GovernanceController
from gpupool.kube.http import HttpServer, build_app
from gpupool.kube.leader import LeaderElector, LeaseConfig
from gpupool.kube.live import LiveConfig, LiveScheduler
from gpupool.kube.metrics import scheduler_registry
from gpupool.kube.signing import RecordSigner, load_signing_key
from gpupool.kube.writes import REPORT_WORKERS

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)


@dataclass
class _Role:
    """Whether this replica leads now (for ``/readyz`` and the leader gauge)."""

    leading: bool = False


async def _campaign_forever(elector: LeaderElector, scheduler: LiveScheduler, role: _Role) -> None:
    async def lead() -> None:
        role.leading = True
        try:
            await scheduler.lead()
        finally:
            role.leading = False

    while True:
        await elector.run(lead)
        log.warning("%s: back to standby", elector.identity)


async def _signing_key(api: KubeAPI, namespace: str) -> bytes:
    """The allocation signing key; waits (with backoff) while the API server cannot give it."""
    delay = 0.5
    while True:
        try:
            return await load_signing_key(api, namespace)
        except (ApiError, OSError, httpx2.HTTPError) as error:
            log.warning("allocation signing key not available yet: %s", error)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 10.0)


def _readiness(scheduler: LiveScheduler, role: _Role) -> tuple[bool, str]:
    if not (scheduler.pods.synced.is_set() and scheduler.nodes.synced.is_set()):
        return False, "informer caches not synced"
    return True, "leader" if role.leading else "standby"


def default_identity() -> str:
    """``hostname-pid``: unique per replica, readable in the Lease and the allocations."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """Everything ``gpupool control-plane`` needs.

    Attributes:
        kubeconfig: The cluster and user; ``None``: the pod's ServiceAccount.
        live: The scheduler.
        lease: The leader election.
        http_address: Where ``/healthz``, ``/readyz`` and ``/metrics`` listen (port 0: any
            free port, logged); ``None``: no HTTP server.
        face: Builds the REST API and dashboard for the replica's scheduler and API client
            (:func:`gpupool.api.app.create_face`), served on the same address; ``None``: none.
        governance: The governance controller (:mod:`gpupool.kube.governance`); ``None``: off.
        db_url: The audit and accounting store; ``None``: no audit records (Events and logs).
    """

    kubeconfig: Path | None
    live: LiveConfig
    lease: LeaseConfig
    http_address: tuple[str, int] | None = ("127.0.0.1", 9402)
    face: Callable[[LiveScheduler, KubeAPI], ASGIApp] | None = None
    governance: GovernanceConfig | None = field(default_factory=GovernanceConfig)
    db_url: str | None = None

    def connect(self, timeout: float = 30.0, connections: int = 16) -> KubeAPI:
        """A client for the cluster, from the kubeconfig or in-cluster."""
        if self.kubeconfig is None:
            return KubeAPI.in_cluster(timeout=timeout, connections=connections)
        return KubeAPI.from_kubeconfig(self.kubeconfig, timeout=timeout, connections=connections)


async def _migrate(engine: AsyncEngine) -> None:
    """Bring the store's schema up to date, retrying while the database is down.

    The writer buffers and retries meanwhile, so the scheduler never waits for the database
    and no record is lost while it is away.
    """
    from gpupool.store.engine import upgrade

    delay = 0.5
    while True:
        try:
            await upgrade(engine)
            return
        except Exception as error:
            log.warning("audit store not reachable yet: %s", error)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 30.0)


async def serve(config: ServiceConfig) -> int:
    """Run one replica until a signal (exit 0) or an unrecoverable error (exit 1).

    Raises:
        OSError: The HTTP address cannot be bound.
        InClusterConfigError: No kubeconfig and no usable ServiceAccount.
    """
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one INFO line per request
    # binds, the reports' writers and the two watches each need a connection of their own
    api = config.connect(connections=config.live.bind_concurrency + REPORT_WORKERS + 4)
    signer = RecordSigner(await _signing_key(api, config.lease.namespace))
    scheduler = LiveScheduler(api, config.live, signer=signer)
    engine, writer = None, None
    if config.db_url is not None:
        from gpupool.store.engine import create_engine
        from gpupool.store.writer import StoreWriter

        engine = create_engine(config.db_url)
        writer = StoreWriter(engine)
        writer.start()
    governance = (
        GovernanceController(scheduler, config.governance, writer)
        if config.governance is not None
        else None
    )
    # its own connections: a renewal must never queue behind a burst of binds
    lease_api = config.connect(timeout=config.lease.renew_deadline)
    elector = LeaderElector(lease_api, config.live.identity, config.lease)
    role = _Role()
    http: HttpServer | None = None
    if config.http_address is not None:
        app = build_app(
            scheduler_registry(scheduler, lambda: role.leading, governance),
            lambda: _readiness(scheduler, role),
            config.face(scheduler, api) if config.face is not None else None,
        )
        try:
            http = HttpServer(app, *config.http_address)
        except OSError:
            await api.close()
            await lease_api.close()
            raise
        log.info("serving /healthz, /readyz and /metrics on %s", http.url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    informers = asyncio.create_task(scheduler.run_informers())
    campaign = asyncio.create_task(_campaign_forever(elector, scheduler, role))
    stopping = asyncio.create_task(stop.wait())
    background = [
        asyncio.create_task(work)
        for work in (
            governance.run() if governance is not None else None,
            _migrate(engine) if engine is not None else None,
        )
        if work is not None
    ]
    serving = asyncio.create_task(http.serve() if http is not None else stop.wait())
    log.info(
        "%s: scheduling pods with schedulerName=%s",
        config.live.identity,
        config.live.scheduler_name,
    )
    try:
        done, _ = await asyncio.wait(
            {informers, campaign, stopping, serving}, return_when=asyncio.FIRST_COMPLETED
        )
        for task in done - {stopping}:
            if not task.cancelled() and task.exception() is not None:
                log.error("stopping: %r", task.exception())
        code = 0 if stopping in done else 1
    finally:
        if http is not None:
            http.stop()  # finishes open requests; a probe during shutdown still gets an answer
        else:
            serving.cancel()
        for task in (campaign, informers, stopping, *background):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                campaign, informers, stopping, serving, *background, return_exceptions=True
            )
        if writer is not None and engine is not None:
            left = await writer.close(timeout=10.0)
            if left:
                log.error("audit store unreachable: %d records not written", left)
            await engine.dispose()
        await elector.release()
        await api.close()
        await lease_api.close()
    return code
