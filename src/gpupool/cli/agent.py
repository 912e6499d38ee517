"""``gpupool agent``: the node agent, one per GPU node (deploy/agent-daemonset.yaml)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated

import typer

from gpupool.agent.fakenvml import PRESETS
from gpupool.cli.options import LogLevel, fail, log_level_of, start_logging

NodeName = Annotated[
    str, typer.Option(help="This node's name (default: $NODE_NAME, from the downward API).")
]
Kubeconfig = Annotated[
    Path | None, typer.Option(help="Kubeconfig (default: the pod's service account).")
]
FakeGpus = Annotated[
    str,
    typer.Option(
        help=f"Use a fake NVML: {', '.join(PRESETS)} (no GPU needed); its processes and "
        "XIDs come from fake-nvml.json in the state folder."
    ),
]
PluginDir = Annotated[Path, typer.Option(help="The kubelet's device-plugin folder.")]
PodResourcesSocket = Annotated[Path, typer.Option(help="The kubelet's PodResources socket.")]
PublishAllocatable = Annotated[
    bool, typer.Option(help="Write allocatable on the Node (kwok nodes: no kubelet).")
]
UsagePeriod = Annotated[float, typer.Option(help="Seconds between idle-signal writes on the Node.")]
ReconcilePeriod = Annotated[
    float, typer.Option(help="Seconds between collections of ended containers' hand-offs.")
]
CollectAfter = Annotated[
    float, typer.Option(help="Seconds a hand-off's devices must be unheld before collection.")
]
Dra = Annotated[
    bool, typer.Option(help="Also be a DRA kubelet plugin and publish the node's ResourceSlice.")
]
PluginsRegistryDir = Annotated[
    Path, typer.Option(help="The kubelet's plugin registration folder (DRA).")
]
KeyNamespace = Annotated[
    str,
    typer.Option(
        help="The scheduler's namespace (its --lease-namespace), where it publishes the public "
        "key allocation records are verified with (configmap gpupool-allocation-key)."
    ),
]
PluginsDir = Annotated[
    Path, typer.Option(help="The kubelet's plugin folder (the DRA service socket).")
]


def agent(
    node_name: NodeName = "",
    kubeconfig: Kubeconfig = None,
    fake_gpus: FakeGpus = "",
    isolation: Annotated[str, typer.Option(help="Share isolation: mps, hami or visible.")] = "mps",
    plugin_dir: PluginDir = Path("/var/lib/kubelet/device-plugins"),
    pod_resources_socket: PodResourcesSocket = Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
    cdi_dir: Annotated[Path, typer.Option(help="The runtime's CDI spec folder.")] = Path(
        "/var/run/cdi"
    ),
    state_dir: Annotated[Path, typer.Option(help="The agent's state folder.")] = Path(
        "/var/lib/gpupool/agent"
    ),
    mps_root: Annotated[Path, typer.Option(help="Host folder of the MPS daemon.")] = Path(
        "/run/gpupool/mps"
    ),
    hami_library: Annotated[
        Path, typer.Option(help="Host path of HAMi-core's libvgpu.so (--isolation hami).")
    ] = Path("/usr/local/gpupool/libvgpu.so"),
    proc_root: Annotated[Path, typer.Option(help="The host's /proc.")] = Path("/proc"),
    publish_allocatable: PublishAllocatable = False,
    metrics_port: Annotated[int, typer.Option(help="Prometheus /metrics port (0: off).")] = 9400,
    usage_period: UsagePeriod = 60.0,
    reconcile_period: ReconcilePeriod = 30.0,
    collect_after: CollectAfter = 300.0,
    key_namespace: KeyNamespace = "kube-system",
    dra: Dra = True,
    plugins_registry_dir: PluginsRegistryDir = Path("/var/lib/kubelet/plugins_registry"),
    plugins_dir: PluginsDir = Path("/var/lib/kubelet/plugins"),
    log_level: LogLevel = "info",
) -> None:
    """Run the node agent: inventory, device and DRA plugins, hand-off, isolation, telemetry."""
    from gpupool.agent.handoff import HandoffConfig
    from gpupool.agent.isolation import IsolationConfig
    from gpupool.agent.service import AgentConfig, DraConfig, serve

    node = node_name or os.environ.get("NODE_NAME", "")
    if not node:
        raise fail("--node-name: required (or set NODE_NAME)")
    level = log_level_of(log_level)
    _check(kubeconfig, metrics_port, usage_period, reconcile_period)
    if collect_after < 0:
        raise fail("--collect-after: must be >= 0")
    if not key_namespace:
        raise fail("--key-namespace: must not be empty")
    try:
        isolation_config = IsolationConfig(
            mode=isolation, mps_root=mps_root, hami_library=hami_library
        )
    except ValueError as error:
        raise fail(f"--isolation: {error}") from None
    start_logging(level)
    config = AgentConfig(
        handoff=HandoffConfig(node, cdi_dir, state_dir, isolation_config, collect_after),
        plugin_dir=plugin_dir,
        publish_allocatable=publish_allocatable,
        usage_period=usage_period,
        reconcile_period=reconcile_period,
        proc_root=proc_root,
        dra=DraConfig(plugins_registry_dir, plugins_dir) if dra else None,
        key_namespace=key_namespace,
    )
    try:
        asyncio.run(serve(config, kubeconfig, fake_gpus, str(pod_resources_socket), metrics_port))
    except (ValueError, RuntimeError) as error:  # unknown preset, NVML not loadable
        raise fail(str(error)) from None
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def _check(
    kubeconfig: Path | None, metrics_port: int, usage_period: float, reconcile_period: float
) -> None:
    if kubeconfig is not None and not kubeconfig.is_file():
        raise fail(f"--kubeconfig: no such file {kubeconfig}")
    if not 0 <= metrics_port < 65536:
        raise fail("--metrics-port: must be 0..65535")
    if usage_period <= 0:
        raise fail("--usage-period: must be > 0")
    if reconcile_period <= 0:
        raise fail("--reconcile-period: must be > 0")
