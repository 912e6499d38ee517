"""``gpupool agent``: the node agent, one per GPU node (deploy/agent-daemonset.yaml)."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated

import typer


def agent(
    node_name: Annotated[
        str, typer.Option(help="This node's name (default: $NODE_NAME, from the downward API).")
    ] = "",
    kubeconfig: Annotated[
        Path | None, typer.Option(help="Kubeconfig (default: the pod's service account).")
    ] = None,
    fake_gpus: Annotated[
        str, typer.Option(help="Use a fake NVML: h100, h200, a100-mig or t4 (no GPU needed).")
    ] = "",
    isolation: Annotated[str, typer.Option(help="Share isolation: mps, hami or visible.")] = "mps",
    max_pods_per_gpu: Annotated[
        int, typer.Option(help="Devices per GPU when the node is in no GPUPool.")
    ] = 4,
    plugin_dir: Annotated[Path, typer.Option(help="The kubelet's device-plugin folder.")] = Path(
        "/var/lib/kubelet/device-plugins"
    ),
    pod_resources_socket: Annotated[
        Path, typer.Option(help="The kubelet's PodResources socket.")
    ] = Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
    cdi_dir: Annotated[Path, typer.Option(help="The runtime's CDI spec folder.")] = Path(
        "/var/run/cdi"
    ),
    state_dir: Annotated[Path, typer.Option(help="The agent's state folder.")] = Path(
        "/var/lib/gpupool/agent"
    ),
    mps_root: Annotated[Path, typer.Option(help="Host folder of the MPS daemon.")] = Path(
        "/run/gpupool/mps"
    ),
    proc_root: Annotated[Path, typer.Option(help="The host's /proc.")] = Path("/proc"),
    publish_allocatable: Annotated[
        bool, typer.Option(help="Write allocatable on the Node (kwok nodes: no kubelet).")
    ] = False,
    metrics_port: Annotated[int, typer.Option(help="Prometheus /metrics port (0: off).")] = 9400,
    usage_period: Annotated[
        float, typer.Option(help="Seconds between idle-signal writes on the Node.")
    ] = 60.0,
    reconcile_period: Annotated[
        float, typer.Option(help="Seconds between collections of ended containers' hand-offs.")
    ] = 30.0,
    collect_after: Annotated[
        float, typer.Option(help="Seconds a hand-off's devices must be unheld before collection.")
    ] = 300.0,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the node agent: GPU inventory, device plugin, hand-off, isolation, telemetry."""
    from gpupool.agent.handoff import HandoffConfig
    from gpupool.agent.isolation import IsolationConfig
    from gpupool.agent.service import AgentConfig, serve
    from gpupool.cli.options import fail

    node = node_name or os.environ.get("NODE_NAME", "")
    if not node:
        raise fail("--node-name: required (or set NODE_NAME)")
    level = logging.getLevelNamesMapping().get(log_level.upper())
    if level is None:
        raise fail(f"--log-level: unknown level {log_level!r}")
    if kubeconfig is not None and not kubeconfig.is_file():
        raise fail(f"--kubeconfig: no such file {kubeconfig}")
    if max_pods_per_gpu < 1:
        raise fail("--max-pods-per-gpu: must be >= 1")
    if not 0 <= metrics_port < 65536:
        raise fail("--metrics-port: must be 0..65535")
    if usage_period <= 0:
        raise fail("--usage-period: must be > 0")
    if reconcile_period <= 0:
        raise fail("--reconcile-period: must be > 0")
    if collect_after < 0:
        raise fail("--collect-after: must be >= 0")
    try:
        isolation_config = IsolationConfig(mode=isolation, mps_root=mps_root)
    except ValueError as error:
        raise fail(f"--isolation: {error}") from None
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = AgentConfig(
        handoff=HandoffConfig(node, cdi_dir, state_dir, isolation_config, collect_after),
        plugin_dir=plugin_dir,
        max_pods_per_gpu=max_pods_per_gpu,
        publish_allocatable=publish_allocatable,
        usage_period=usage_period,
        reconcile_period=reconcile_period,
        proc_root=proc_root,
    )
    try:
        asyncio.run(serve(config, kubeconfig, fake_gpus, str(pod_resources_socket), metrics_port))
    except (ValueError, RuntimeError) as error:  # unknown preset, NVML not loadable
        raise fail(str(error)) from None
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
