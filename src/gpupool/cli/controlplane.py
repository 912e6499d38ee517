"""``gpupool control-plane``: run the live scheduler against a cluster."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpupool.cli.controlplane_http import FaceFactory, face_builder, loopback, serving_tls
from gpupool.cli.options import LogLevel, fail, log_level_of, start_logging

if TYPE_CHECKING:
    from gpupool.kube.client.leader import LeaseConfig
    from gpupool.kube.controlplane.service import ServiceConfig
    from gpupool.kube.governance.config import GovernanceConfig
    from gpupool.kube.scheduler.config import LiveConfig

Kubeconfig = Annotated[
    Path | None,
    typer.Option(help="Kubeconfig of the cluster (default: in a pod, its ServiceAccount)."),
]
SchedulerName = Annotated[str, typer.Option(help="Schedule pods with this spec.schedulerName.")]
HttpAddress = Annotated[
    str,
    typer.Option(help="host:port of /healthz, /readyz and /metrics ('' for none, port 0: any)."),
]
ServeApi = Annotated[
    bool, typer.Option(help="Also serve the REST API (/api/v1) and dashboard (/) there.")
]
StoreUrl = Annotated[
    str,
    typer.Option(
        "--db",
        envvar="GPUPOOL_DB_URL",
        help="Audit store URL (sqlite+aiosqlite:///PATH or postgresql+asyncpg://...); "
        "'' (default): no audit records.",
    ),
]
Claims = Annotated[
    bool,
    typer.Option(
        help="Place pods with DRA claims of gpupool's driver (watches resource.k8s.io/v1, "
        "Kubernetes 1.34 or later). Off by default for now."
    ),
]
Backfill = Annotated[
    str,
    typer.Option(
        help="Backfill behind blocked pods: large-pods (up to 16 reservations per pool for "
        "pods above one GPU, kept for their pods), easy (one per pool) or strict (nothing "
        "starts behind a blocked pod of its pool)."
    ),
]
TlsCert = Annotated[
    Path | None,
    typer.Option(
        help="Serve --http-address over HTTPS with this PEM certificate (read again when "
        "the file changes); needed for the API anywhere but loopback."
    ),
]
TlsKey = Annotated[Path | None, typer.Option(help="The certificate's PEM key.")]
ApiAudience = Annotated[
    str, typer.Option(help="Audience the API's bearer tokens must be issued for.")
]
InsecureLocal = Annotated[
    bool,
    typer.Option(
        help="Let loopback read the API without a token (a laptop only: a sidecar or "
        "port-forward makes every caller look local)."
    ),
]
Governance = Annotated[
    bool, typer.Option(help="Run the governance controller (idle, limits, cleanup).")
]
CreateSigningKey = Annotated[
    bool,
    typer.Option(
        help="Make the allocation key pair when it is missing (off: wait for the installer's)."
    ),
]
CreateLease = Annotated[
    bool,
    typer.Option(
        help="Make the Lease when it is missing (off: wait for the installer's, as the chart's "
        "replicas do, so none makes it again after helm uninstall)."
    ),
]
ServingPod = Annotated[
    str,
    typer.Option(
        help="NAMESPACE/NAME of this replica's own pod: labelled gpupool.io/serving=true while "
        "it leads, so a Service selecting that label sends API readers to the leader only "
        "('' (default): no label)."
    ),
]
GovernanceInterval = Annotated[float, typer.Option(help="Seconds between governance passes.")]
CrashLoopRestarts = Annotated[
    int, typer.Option(help="Restarts after which a CrashLoopBackOff pod is cleaned up.")
]
NotRunningTimeout = Annotated[float, typer.Option(help="Seconds a bound pod may stay not Running.")]
NodeNotReadyTimeout = Annotated[float, typer.Option(help="Seconds a pod's node may stay NotReady.")]


def control_plane(
    kubeconfig: Kubeconfig = None,
    identity: Annotated[str, typer.Option(help="Replica name (default: hostname-pid).")] = "",
    policy: Annotated[str, typer.Option(help="Placement policy.")] = "default",
    scheduler_name: SchedulerName = "gpupool",
    lease_namespace: Annotated[str, typer.Option(help="Namespace of the Lease.")] = "kube-system",
    lease_name: Annotated[str, typer.Option(help="Name of the Lease.")] = "gpupool-scheduler",
    lease_duration: Annotated[float, typer.Option(help="Lease duration, seconds.")] = 15.0,
    renew_deadline: Annotated[float, typer.Option(help="Renew deadline, seconds.")] = 10.0,
    retry_period: Annotated[float, typer.Option(help="Retry period, seconds.")] = 2.0,
    bind_concurrency: Annotated[int, typer.Option(help="Bindings in flight at once.")] = 64,
    backfill: Backfill = "large-pods",
    claims: Claims = False,
    log_level: LogLevel = "info",
    http_address: HttpAddress = "127.0.0.1:9402",
    api: ServeApi = True,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    api_audience: ApiAudience = "gpupool.io/api",
    insecure_local: InsecureLocal = False,
    db: StoreUrl = "",
    governance: Governance = True,
    create_signing_key: CreateSigningKey = True,
    create_lease: CreateLease = True,
    serving_pod: ServingPod = "",
    governance_interval: GovernanceInterval = 5.0,
    crash_loop_restarts: CrashLoopRestarts = 5,
    not_running_timeout: NotRunningTimeout = 900.0,
    node_not_ready_timeout: NodeNotReadyTimeout = 300.0,
) -> None:
    """Run the scheduler live: one active replica per Lease, the others on standby."""
    from gpupool.kube.controlplane.http import parse_address
    from gpupool.kube.controlplane.service import ServiceConfig
    from gpupool.kube.controlplane.serving_label import parse_pod

    _check_kubeconfig(kubeconfig)
    try:
        address = parse_address(http_address) if http_address else None
        own_pod = parse_pod(serving_pod) if serving_pod else None
    except ValueError as error:
        raise fail(str(error)) from None
    tls = serving_tls(address, tls_cert, tls_key, api)
    if insecure_local and not loopback(address):
        raise fail(
            "--insecure-local: only with a loopback --http-address: in a pod, a sidecar or "
            "port-forward makes every caller look local"
        )
    start_logging(log_level_of(log_level))
    live = _live(identity, scheduler_name, policy, bind_concurrency, backfill, claims)
    lease = _lease(
        lease_namespace, lease_name, (lease_duration, renew_deadline, retry_period), create_lease
    )
    face: FaceFactory | None = face_builder(api_audience, insecure_local) if api else None
    governance_config = None
    if governance:
        governance_config = _governance(
            governance_interval, crash_loop_restarts, not_running_timeout, node_not_ready_timeout
        )
    if db:
        _check_store_url(db)
    config = ServiceConfig(
        kubeconfig=kubeconfig,
        live=live,
        lease=lease,
        http_address=address,
        tls=tls,
        face=face,
        governance=governance_config,
        db_url=db or None,
        create_signing_key=create_signing_key,
        serving_pod=own_pod,
    )
    _serve(config, http_address)


def _live(
    identity: str,
    scheduler_name: str,
    policy: str,
    bind_concurrency: int,
    backfill: str,
    claims: bool,
) -> LiveConfig:
    """The scheduler's settings; :class:`LiveConfig` checks them, the error names the option."""
    from gpupool.kube.controlplane.service import default_identity
    from gpupool.kube.scheduler.config import LiveConfig

    try:
        return LiveConfig(
            identity=identity or default_identity(),
            scheduler_name=scheduler_name,
            policy=policy,
            bind_concurrency=bind_concurrency,
            backfill=backfill,
            claims=claims,
        )
    except ValueError as error:
        field, _, message = str(error).partition(": ")
        raise fail(f"--{field.replace('_', '-')}: {message}") from None


def _check_kubeconfig(kubeconfig: Path | None) -> None:
    """The kubeconfig exists, or there is none and this runs in a pod."""
    if kubeconfig is not None and not kubeconfig.is_file():
        raise fail(f"--kubeconfig: no such file {kubeconfig}")
    if kubeconfig is None and not (
        os.environ.get("KUBERNETES_SERVICE_HOST") and os.environ.get("KUBERNETES_SERVICE_PORT")
    ):
        raise fail(
            "--kubeconfig: not given, and not in a pod (KUBERNETES_SERVICE_HOST and "
            "KUBERNETES_SERVICE_PORT are not set)"
        )


def _lease(
    namespace: str, name: str, timings: tuple[float, float, float], create_missing: bool
) -> LeaseConfig:
    from gpupool.kube.client.leader import LeaseConfig

    duration, renew_deadline, retry_period = timings
    try:
        return LeaseConfig(
            namespace=namespace,
            name=name,
            lease_duration=duration,
            renew_deadline=renew_deadline,
            retry_period=retry_period,
            create_missing=create_missing,
        )
    except ValueError as error:
        raise fail(f"--lease-duration/--renew-deadline/--retry-period: {error}") from None


def _governance(
    interval: float, crash_loop_restarts: int, not_running_timeout: float, node_not_ready: float
) -> GovernanceConfig:
    from gpupool.governance.rules import CleanupLimits, GovernanceSettingsError
    from gpupool.kube.governance.config import GovernanceConfig

    try:
        limits = CleanupLimits(crash_loop_restarts, not_running_timeout, node_not_ready)
        return GovernanceConfig(interval, limits)
    except GovernanceSettingsError as error:
        option = {
            "crashLoopRestarts": "--crash-loop-restarts",
            "notRunningTimeout": "--not-running-timeout",
            "nodeNotReadyTimeout": "--node-not-ready-timeout",
        }.get(error.field_name, error.field_name)
        raise fail(f"{option}: {str(error).split(': ', 1)[1]}") from None
    except ValueError as error:
        raise fail(f"--governance-interval: {error}") from None


def _check_store_url(db: str) -> None:
    from gpupool.store.engine import StoreURLError, store_url

    try:
        store_url(db)
    except StoreURLError as error:
        raise fail(f"--db: {error}") from None


def _serve(config: ServiceConfig, http_address: str) -> None:
    """Run the replica; its exit code is the command's."""
    from gpupool.kube.client.api import InClusterConfigError
    from gpupool.kube.controlplane.service import serve
    from gpupool.kube.objects.signing import KeyFormatError

    try:
        code = asyncio.run(serve(config))
    except (InClusterConfigError, KeyFormatError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    except OSError as error:
        typer.echo(f"error: --http-address {http_address}: {error.strerror or error}", err=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)
