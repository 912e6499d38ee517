"""``gpupool install-crds``: the CRDs, DeviceClasses and admission policies gpupool needs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.options import fail


def install_crds(
    kubeconfig: Annotated[Path, typer.Option(help="Kubeconfig of the cluster.")],
    scheduler_identity: Annotated[
        list[str] | None,
        typer.Option(
            help="User allowed to write pods' gpupool.io/allocation and to create gpupool pods "
            "with spec.nodeName (repeat for several; default: the gpupool-scheduler "
            "ServiceAccount of gpupool-system)."
        ),
    ] = None,
    agent_identity: Annotated[
        list[str] | None,
        typer.Option(
            help="The node agents' user, kept to its own Node (repeat for several; default: the "
            "gpupool-agent ServiceAccount of kube-system)."
        ),
    ] = None,
    scheduler_name: Annotated[
        str, typer.Option(help="spec.schedulerName of gpupool's pods.")
    ] = "gpupool",
    admission_policy: Annotated[
        bool,
        typer.Option(help="Also install the admission policies (allocation, bypass, agents)."),
    ] = True,
) -> None:
    """Install (or update) the CRDs and the admission policies."""
    from gpupool.kube.client.api import ApiError, KubeAPI
    from gpupool.kube.install.admission_policy import (
        DEFAULT_AGENT_IDENTITIES,
        DEFAULT_SCHEDULER_IDENTITIES,
        agent_policy_manifests,
        bypass_policy_manifests,
    )
    from gpupool.kube.install.crds import crd_manifests, install_crds

    if not kubeconfig.is_file():
        raise fail(f"--kubeconfig: no such file {kubeconfig}")
    identities = tuple(scheduler_identity or DEFAULT_SCHEDULER_IDENTITIES)
    agents = tuple(agent_identity or DEFAULT_AGENT_IDENTITIES)
    try:
        bypass_policy_manifests(identities, scheduler_name)
        agent_policy_manifests(agents)
    except ValueError as error:
        raise fail(str(error)) from None

    async def run() -> None:
        api = KubeAPI.from_kubeconfig(kubeconfig)
        try:
            await install_crds(
                api,
                scheduler_identities=identities if admission_policy else (),
                agent_identities=agents if admission_policy else (),
                scheduler_name=scheduler_name,
            )
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
        _print_policies(identities, agents)


def _print_policies(identities: tuple[str, ...], agents: tuple[str, ...]) -> None:
    """Say who each installed admission policy lets do what."""
    from gpupool.kube.install.admission_policy import (
        AGENT_POLICY_NAME,
        BYPASS_POLICY_NAME,
        DECLARED_RUNTIME_POLICY_NAME,
        POLICY_NAME,
        QUEUE_CLASS_POLICY_NAME,
    )

    schedulers, nodes = ", ".join(identities), ", ".join(agents)
    typer.echo(
        f"installed ValidatingAdmissionPolicy {POLICY_NAME}: only {schedulers} may write "
        "gpupool.io/allocation"
    )
    typer.echo(
        f"installed ValidatingAdmissionPolicy {BYPASS_POLICY_NAME}: only {schedulers} may "
        "create gpupool pods with spec.nodeName"
    )
    typer.echo(
        f"installed ValidatingAdmissionPolicy {AGENT_POLICY_NAME}: {nodes} may change only "
        "the Node its token is bound to"
    )
    typer.echo(
        f"installed ValidatingAdmissionPolicy {QUEUE_CLASS_POLICY_NAME}: a pod's "
        "gpupool.io/class must be in spec.allowedClasses of its namespace's GPUQueues"
    )
    typer.echo(
        f"installed ValidatingAdmissionPolicy {DECLARED_RUNTIME_POLICY_NAME}: a pod's "
        "gpupool.io/expected-runtime is fixed when it is created"
    )
