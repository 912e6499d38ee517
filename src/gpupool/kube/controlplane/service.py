"""``gpupool control-plane``: one replica of the live scheduler, from kubeconfig to exit code.

It connects with a kubeconfig, or in a pod with its ServiceAccount
(:meth:`~gpupool.kube.client.api.KubeAPI.in_cluster`), and serves ``/healthz``, ``/readyz`` and
``/metrics`` (:mod:`gpupool.kube.controlplane.http`, :mod:`gpupool.kube.controlplane.metrics`) in
the same loop. Every replica keeps its informers running; the Lease decides which one schedules. A
replica that loses the Lease stops scheduling at once and campaigns again as a standby; when it next
leads it starts from a fresh relist with no assumptions left from its previous term. The process
exits 0 on SIGTERM/SIGINT, after releasing the Lease so a standby takes over at once, and 1 if its
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

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.client.leader import LeaderElector, LeaseConfig
from gpupool.kube.client.serving_tls import ReloadingCertificate
from gpupool.kube.client.signing_key import load_signing_key
from gpupool.kube.controlplane.http import HttpServer, build_app
from gpupool.kube.controlplane.metrics import scheduler_registry
from gpupool.kube.controlplane.serving_label import ServingLabel
from gpupool.kube.governance.config import GovernanceConfig
from gpupool.kube.governance.controller import GovernanceController
from gpupool.kube.objects.signing import RecordSigner
from gpupool.kube.scheduler.config import LiveConfig
from gpupool.kube.scheduler.governance_port import GovernancePort
from gpupool.kube.scheduler.live import LiveScheduler
from gpupool.kube.scheduler.rights import PROBE_PERIOD, probe
from gpupool.kube.scheduler.watch_count import scheduler_watches
from gpupool.kube.scheduler.writes import REPORT_WORKERS
from gpupool.retry import Backoff, retry

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from gpupool.store.writer import StoreWriter

log = logging.getLogger(__name__)


@dataclass
class _Role:
    """Whether this replica leads now (for ``/readyz`` and the leader gauge)."""

    leading: bool = False


async def _campaign_forever(
    elector: LeaderElector, scheduler: LiveScheduler, role: _Role, label: ServingLabel | None
) -> None:
    """Lead whenever the Lease allows, but never while the policy refuses our allocations.

    A replica that may not write allocations would take the Lease from one that may, and then
    have every bind refused. While it leads, its pod carries the serving label (if configured).
    """

    async def lead() -> None:
        role.leading = True
        try:
            if label is not None:
                await label.lead()
            await scheduler.lead()
        finally:
            role.leading = False
            if label is not None:
                await label.stand_by()

    if label is not None:
        await label.stand_by()  # a label left by this pod's crashed earlier process

    while True:
        while scheduler.rights.denied:
            await asyncio.sleep(1.0)
        await elector.run(lead)
        log.warning("%s: back to standby", elector.identity)


SIGNING_KEY_BACKOFF = Backoff(0.5, 10.0)
"""Waits while the API server cannot give the signing key (it is starting, or the Secret is
not written yet): a replica must come up within seconds of either."""
STORE_BACKOFF = Backoff(0.5, 30.0)
"""Waits while the audit store is unreachable: the writer buffers meanwhile, so there is no
hurry, and a database that is down for long is not asked twice a second."""


async def _watch_rights(api: KubeAPI, namespace: str, scheduler: LiveScheduler) -> None:
    """Probe the allocation policy again every PROBE_PERIOD seconds (a fix needs no restart)."""
    while True:
        await asyncio.sleep(PROBE_PERIOD)
        await probe(api, namespace, scheduler.rights)


async def _signing_key(api: KubeAPI, namespace: str, create: bool) -> RecordSigner:
    """The allocation signer; waits (with backoff) while the API server cannot give its key."""

    def unavailable(error: Exception, _delay: float) -> None:
        log.warning("allocation signing key not available yet: %s", error)

    return await retry(
        lambda: load_signing_key(api, namespace, create=create),
        SIGNING_KEY_BACKOFF,
        unavailable,
        (ApiError, OSError, httpx2.HTTPError),
    )


def _readiness(scheduler: LiveScheduler, role: _Role) -> tuple[bool, str]:
    if scheduler.rights.denied:
        return False, scheduler.rights.denied
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
        tls: Serve that address over HTTPS with this certificate (read again when its files
            change); ``None``: plain HTTP.
        face: Builds the REST API and dashboard for the replica's scheduler, API client and
            store (:func:`gpupool.api.app.live_face`), served on the same address; ``None``:
            none.
        governance: The governance controller (:mod:`gpupool.kube.governance.controller`);
            ``None``: off.
        db_url: The audit and accounting store; ``None``: no audit records (Events and logs).
        create_signing_key: Make the allocation key pair when it is missing; off where the
            installer owns it (the Helm chart).
        serving_pod: ``(namespace, name)`` of this replica's own pod, labelled while it leads
            (:mod:`gpupool.kube.controlplane.serving_label`); ``None``: no label.
    """

    kubeconfig: Path | None
    live: LiveConfig
    lease: LeaseConfig
    http_address: tuple[str, int] | None = ("127.0.0.1", 9402)
    tls: ReloadingCertificate | None = None
    face: Callable[[LiveScheduler, KubeAPI, AsyncEngine | None], ASGIApp] | None = None
    governance: GovernanceConfig | None = field(default_factory=GovernanceConfig)
    db_url: str | None = None
    create_signing_key: bool = True
    serving_pod: tuple[str, str] | None = None

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

    def unreachable(error: Exception, _delay: float) -> None:
        log.warning("audit store not reachable yet: %s", error)

    await retry(lambda: upgrade(engine), STORE_BACKOFF, unreachable)


async def serve(config: ServiceConfig) -> int:
    """Run one replica until a signal (exit 0) or an unrecoverable error (exit 1).

    Raises:
        OSError: The HTTP address cannot be bound.
        InClusterConfigError: No kubeconfig and no usable ServiceAccount.
    """
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one INFO line per request
    # binds, the reports' writers and the watches each need a connection of their own
    watches = scheduler_watches(config.live.claims)
    api = config.connect(connections=config.live.bind_concurrency + REPORT_WORKERS + watches)
    signer = await _signing_key(api, config.lease.namespace, config.create_signing_key)
    scheduler = LiveScheduler(api, config.live, signer=signer)
    await probe(api, config.lease.namespace, scheduler.rights)  # said once, before campaigning
    engine, writer = _open_store(config.db_url)
    governance = (
        GovernanceController(GovernancePort(scheduler), config.governance, writer)
        if config.governance is not None
        else None
    )
    # its own connections: a renewal must never queue behind a burst of binds
    lease_api = config.connect(timeout=config.lease.renew_deadline)
    elector = LeaderElector(lease_api, config.live.identity, config.lease)
    role = _Role()
    try:
        http = _http_server(config, scheduler, role, governance, api, engine)
    except OSError:
        await api.close()
        await lease_api.close()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    informers = asyncio.create_task(scheduler.run_informers())
    label = ServingLabel(api, *config.serving_pod) if config.serving_pod is not None else None
    campaign = asyncio.create_task(_campaign_forever(elector, scheduler, role, label))
    stopping = asyncio.create_task(stop.wait())
    background = [
        asyncio.create_task(work)
        for work in (
            governance.run() if governance is not None else None,
            _migrate(engine) if engine is not None else None,
            _watch_rights(api, config.lease.namespace, scheduler),
        )
        if work is not None
    ]
    serving = asyncio.create_task(http.serve() if http is not None else stop.wait())
    log.info(
        "%s: scheduling pods with schedulerName=%s (policy %s, backfill %s)",
        config.live.identity,
        config.live.scheduler_name,
        config.live.policy,
        config.live.backfill,
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
        await _close_store(engine, writer)
        await elector.release()
        await api.close()
        await lease_api.close()
    return code


def _open_store(db_url: str | None) -> tuple[AsyncEngine | None, StoreWriter | None]:
    """The audit store's engine and its started writer (none without a URL)."""
    if db_url is None:
        return None, None
    from gpupool.store.engine import create_engine
    from gpupool.store.writer import StoreWriter

    engine = create_engine(db_url)
    writer = StoreWriter(engine)
    writer.start()
    return engine, writer


async def _close_store(engine: AsyncEngine | None, writer: StoreWriter | None) -> None:
    """Write what is buffered (for a while at most), then let the database go."""
    if writer is None or engine is None:
        return
    left = await writer.close(timeout=10.0)
    if left:
        log.error("audit store unreachable: %d records not written", left)
    await engine.dispose()


def _http_server(
    config: ServiceConfig,
    scheduler: LiveScheduler,
    role: _Role,
    governance: GovernanceController | None,
    api: KubeAPI,
    engine: AsyncEngine | None,
) -> HttpServer | None:
    """Probes, metrics and (if configured) the face, on the configured address.

    Raises:
        OSError: The address cannot be bound.
    """
    if config.http_address is None:
        return None
    app = build_app(
        scheduler_registry(scheduler, lambda: role.leading, governance),
        lambda: _readiness(scheduler, role),
        config.face(scheduler, api, engine) if config.face is not None else None,
    )
    http = HttpServer(app, *config.http_address, config.tls)
    log.info("serving /healthz, /readyz and /metrics on %s", http.url)
    return http
