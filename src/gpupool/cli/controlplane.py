"""``gpupool control-plane``: run the live scheduler against a cluster; ``install-crds``."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated

import typer


def control_plane(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="Kubeconfig of the cluster (default: in a pod, its ServiceAccount)."),
    ] = None,
    identity: Annotated[str, typer.Option(help="Replica name (default: hostname-pid).")] = "",
    policy: Annotated[str, typer.Option(help="Placement policy.")] = "default",
    scheduler_name: Annotated[
        str, typer.Option(help="Schedule pods with this spec.schedulerName.")
    ] = "gpupool",
    lease_namespace: Annotated[str, typer.Option(help="Namespace of the Lease.")] = "kube-system",
    lease_name: Annotated[str, typer.Option(help="Name of the Lease.")] = "gpupool-scheduler",
    lease_duration: Annotated[float, typer.Option(help="Lease duration, seconds.")] = 15.0,
    renew_deadline: Annotated[float, typer.Option(help="Renew deadline, seconds.")] = 10.0,
    retry_period: Annotated[float, typer.Option(help="Retry period, seconds.")] = 2.0,
    bind_concurrency: Annotated[int, typer.Option(help="Bindings in flight at once.")] = 64,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    http_address: Annotated[
        str,
        typer.Option(
            help="host:port of /healthz, /readyz and /metrics ('' for none, port 0: any)."
        ),
    ] = "127.0.0.1:9402",
    api: Annotated[
        bool,
        typer.Option(help="Also serve the REST API (/api/v1) and dashboard (/) there."),
    ] = True,
    db: Annotated[
        str,
        typer.Option(
            "--db",
            envvar="GPUPOOL_DB_URL",
            help="Audit store URL (sqlite+aiosqlite:///PATH or postgresql+asyncpg://...); "
            "'' (default): no audit records.",
        ),
    ] = "",
    governance: Annotated[
        bool, typer.Option(help="Run the governance controller (idle, limits, cleanup).")
    ] = True,
    governance_interval: Annotated[
        float, typer.Option(help="Seconds between governance passes.")
    ] = 5.0,
    crash_loop_restarts: Annotated[
        int, typer.Option(help="Restarts after which a CrashLoopBackOff pod is cleaned up.")
    ] = 5,
    not_running_timeout: Annotated[
        float, typer.Option(help="Seconds a bound pod may stay not Running.")
    ] = 900.0,
    node_not_ready_timeout: Annotated[
        float, typer.Option(help="Seconds a pod's node may stay NotReady.")
    ] = 300.0,
) -> None:
    """Run the scheduler live: one active replica per Lease, the others on standby."""
    from gpupool.cli.options import fail
    from gpupool.kube.api import InClusterConfigError
    from gpupool.kube.http import parse_address
    from gpupool.kube.leader import LeaseConfig
    from gpupool.kube.live import LIVE_POLICIES, LiveConfig
    from gpupool.kube.service import ServiceConfig, default_identity, serve

    if kubeconfig is not None and not kubeconfig.is_file():
        raise fail(f"--kubeconfig: no such file {kubeconfig}")
    if kubeconfig is None and not (
        os.environ.get("KUBERNETES_SERVICE_HOST") and os.environ.get("KUBERNETES_SERVICE_PORT")
    ):
        raise fail(
            "--kubeconfig: not given, and not in a pod (KUBERNETES_SERVICE_HOST and "
            "KUBERNETES_SERVICE_PORT are not set)"
        )
    try:
        address = parse_address(http_address) if http_address else None
    except ValueError as error:
        raise fail(str(error)) from None
    level = logging.getLevelNamesMapping().get(log_level.upper())
    if level is None:
        raise fail(f"--log-level: unknown level {log_level!r}")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if policy not in LIVE_POLICIES:
        raise fail(f"--policy: {policy!r} is not one of {', '.join(LIVE_POLICIES)}")
    if bind_concurrency < 1:
        raise fail("--bind-concurrency: must be >= 1")
    try:
        lease = LeaseConfig(
            namespace=lease_namespace,
            name=lease_name,
            lease_duration=lease_duration,
            renew_deadline=renew_deadline,
            retry_period=retry_period,
        )
    except ValueError as error:
        raise fail(f"--lease-duration/--renew-deadline/--retry-period: {error}") from None
    live = LiveConfig(
        identity=identity or default_identity(),
        scheduler_name=scheduler_name,
        policy=policy,
        bind_concurrency=bind_concurrency,
    )
    face = None
    if api:
        try:
            from gpupool.api.app import live_face
        except ImportError as error:
            raise fail(
                f"--api: the REST API needs the face extra (pip install 'gpupool[face]'), "
                f"or pass --no-api: {error}"
            ) from None
        face = live_face
    governance_config = None
    if governance:
        from gpupool.governance.rules import CleanupLimits, GovernanceSettingsError
        from gpupool.kube.governance import GovernanceConfig

        try:
            limits = CleanupLimits(crash_loop_restarts, not_running_timeout, node_not_ready_timeout)
            governance_config = GovernanceConfig(governance_interval, limits)
        except GovernanceSettingsError as error:
            option = {
                "crashLoopRestarts": "--crash-loop-restarts",
                "notRunningTimeout": "--not-running-timeout",
                "nodeNotReadyTimeout": "--node-not-ready-timeout",
            }.get(error.field_name, error.field_name)
            raise fail(f"{option}: {str(error).split(': ', 1)[1]}") from None
        except ValueError as error:
            raise fail(f"--governance-interval: {error}") from None
    if db:
        from gpupool.store.engine import StoreURLError, store_url

        try:
            store_url(db)
        except StoreURLError as error:
            raise fail(f"--db: {error}") from None
    config = ServiceConfig(
        kubeconfig=kubeconfig,
        live=live,
        lease=lease,
        http_address=address,
        face=face,
        governance=governance_config,
        db_url=db or None,
    )
    try:
        code = asyncio.run(serve(config))
    except InClusterConfigError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    except OSError as error:
        typer.echo(f"error: --http-address {http_address}: {error.strerror or error}", err=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def install_crds(
    kubeconfig: Annotated[Path, typer.Option(help="Kubeconfig of the cluster.")],
    scheduler_identity: Annotated[
        list[str] | None,
        typer.Option(
            help="User allowed to write pods' gpupool.io/allocation (repeat for several; "
            "default: the gpupool-scheduler ServiceAccount of gpupool-system)."
        ),
    ] = None,
    admission_policy: Annotated[
        bool,
        typer.Option(help="Also install the policy that lets only the scheduler allocate."),
    ] = True,
) -> None:
    """Install (or update) the CRDs and the allocation admission policy."""
    from gpupool.cli.options import fail
    from gpupool.kube.admission_policy import (
        DEFAULT_SCHEDULER_IDENTITIES,
        POLICY_NAME,
        check_identities,
    )
    from gpupool.kube.api import ApiError, KubeAPI
    from gpupool.kube.crds import crd_manifests, install_crds

    if not kubeconfig.is_file():
        raise fail(f"--kubeconfig: no such file {kubeconfig}")
    identities = tuple(scheduler_identity or DEFAULT_SCHEDULER_IDENTITIES)
    try:
        check_identities(identities)
    except ValueError as error:
        raise fail(str(error)) from None

    async def run() -> None:
        api = KubeAPI.from_kubeconfig(kubeconfig)
        try:
            await install_crds(api, scheduler_identities=identities if admission_policy else ())
        finally:
            await api.close()

    try:
        asyncio.run(run())
    except (ApiError, TimeoutError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    for manifest in crd_manifests():
        typer.echo(f"installed {manifest['metadata']['name']}")
    if admission_policy:
        typer.echo(
            f"installed ValidatingAdmissionPolicy {POLICY_NAME}: only "
            f"{', '.join(identities)} may write gpupool.io/allocation"
        )
