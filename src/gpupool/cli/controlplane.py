"""``gpupool control-plane``: run the live scheduler against a cluster."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer


def control_plane(
    kubeconfig: Annotated[Path, typer.Option(help="Kubeconfig of the cluster to schedule.")],
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
) -> None:
    """Run the scheduler live: one active replica per Lease, the others on standby."""
    from gpupool.cli.options import fail
    from gpupool.kube.leader import LeaseConfig
    from gpupool.kube.live import LIVE_POLICIES, LiveConfig
    from gpupool.kube.service import ServiceConfig, default_identity, serve

    if not kubeconfig.is_file():
        raise fail(f"--kubeconfig: no such file {kubeconfig}")
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
    code = asyncio.run(serve(ServiceConfig(kubeconfig=kubeconfig, live=live, lease=lease)))
    raise typer.Exit(code)


def install_crds(
    kubeconfig: Annotated[Path, typer.Option(help="Kubeconfig of the cluster.")],
) -> None:
    """Install (or update) the GPUPool and GPUQueue CRDs and wait until they are served."""
    from gpupool.cli.options import fail
    from gpupool.kube.api import ApiError, KubeAPI
    from gpupool.kube.crds import crd_manifests, install_crds

    if not kubeconfig.is_file():
        raise fail(f"--kubeconfig: no such file {kubeconfig}")

    async def run() -> None:
        api = KubeAPI.from_kubeconfig(kubeconfig)
        try:
            await install_crds(api)
        finally:
            await api.close()

    try:
        asyncio.run(run())
    except (ApiError, TimeoutError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    for manifest in crd_manifests():
        typer.echo(f"installed {manifest['metadata']['name']}")
