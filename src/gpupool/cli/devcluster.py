"""``gpupool dev-cluster``: a local control plane with fake GPU nodes, for trying gpupool by hand.

A sub-app of its own so that later verbs (``down`` for a detached cluster, ``status``) have a
place; today ``up`` runs in the foreground until Ctrl-C. Heavy imports (cryptography, lightkube)
happen inside the command, so ``gpupool --help`` stays fast and works without the ``kube`` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.options import fail

devcluster_app = typer.Typer(
    help="A local Kubernetes control plane (etcd, kube-apiserver, kwok) with fake GPU nodes.",
    no_args_is_help=True,
)


@devcluster_app.command("up")
def up(
    nodes: Annotated[int, typer.Option(help="Fake GPU nodes to create.")] = 50,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node (0: CPU-only nodes).")] = 8,
    gpu_model: Annotated[str, typer.Option(help="GPU model label of the nodes.")] = "H100",
    gpu_memory_mib: Annotated[int, typer.Option(help="Memory per GPU in MiB.")] = 81559,
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir", help="Keep certificates, kubeconfig and logs here (default: a temp folder)."
        ),
    ] = None,
    kube_scheduler: Annotated[
        bool,
        typer.Option(
            "--kube-scheduler/--no-kube-scheduler",
            help="Also run kube-scheduler for pods of the default scheduler.",
        ),
    ] = True,
    real_node: Annotated[
        bool,
        typer.Option(
            "--real-node/--no-real-node",
            help="Also join a real node: containerd, runc and the real kubelet (needs root and "
            "scripts/build-kubelet.sh, build-containerd.sh, build-images.sh).",
        ),
    ] = False,
    real_node_name: Annotated[str, typer.Option(help="The real node's name.")] = "real-node",
) -> None:
    """Start etcd, kube-apiserver and kwok with fake GPU nodes; Ctrl-C stops them all."""
    try:
        from gpupool.devcluster.session import DevClusterConfig
    except ImportError as exc:
        raise fail(
            f"{exc.name} is missing; install the kube extra: pip install 'gpupool[kube]'"
        ) from None

    config = DevClusterConfig(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu_model=gpu_model,
        gpu_memory_mib=gpu_memory_mib,
        folder=directory.resolve() if directory is not None else None,
        kube_scheduler=kube_scheduler,
        real_node=real_node_name if real_node else None,
    )
    try:
        config.validate()
    except ValueError as exc:
        raise fail(str(exc)) from None

    from gpupool.devcluster.binaries import MissingBinariesError
    from gpupool.devcluster.processes import StartError
    from gpupool.devcluster.realnode import RealNodeError
    from gpupool.devcluster.session import ChildExitedError, run_session

    def say(text: str) -> None:
        typer.echo(text)

    try:
        reason = run_session(config, say)
    except (MissingBinariesError, RealNodeError) as exc:
        raise fail(str(exc)) from None
    except (StartError, ChildExitedError, TimeoutError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(f"dev cluster stopped ({reason}).", err=True)
