"""The ``gpupool`` command: one console script, one subcommand per job.

Commands import what they need inside their bodies, so ``gpupool --help`` stays fast and optional
dependencies (matplotlib) load only for the command that uses them. Bad arguments end with a
one-line error that names the option, never a traceback.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpupool.cli.agent import agent
from gpupool.cli.audit import audit
from gpupool.cli.congestion_report import report_congestion
from gpupool.cli.controlplane import control_plane
from gpupool.cli.db import db_app
from gpupool.cli.devcluster import devcluster_app
from gpupool.cli.face import (
    CaOption,
    ServerOption,
    TokenOption,
    report_contention,
    report_teams,
    status,
    top,
)
from gpupool.cli.install_crds import install_crds
from gpupool.cli.options import SeedsError, fail, parse_seeds
from gpupool.cli.report import report_app
from gpupool.cli.sim_dynamic import sim_app
from gpupool.cli.webhook import webhook_app

if TYPE_CHECKING:
    from rich.table import Table

app = typer.Typer(
    help="gpupool: shared GPUs for Kubernetes, schedulable, isolated, reclaimable, governable.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
bench_app = typer.Typer(help="Benchmarks that print numbers and write JSON.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
app.command("control-plane")(control_plane)
app.command("install-crds")(install_crds)
app.add_typer(devcluster_app, name="dev-cluster")
app.add_typer(webhook_app, name="webhook")
app.command("agent")(agent)
app.command("audit")(audit)
app.add_typer(report_app, name="report")
app.add_typer(db_app, name="db")
app.add_typer(sim_app, name="sim")
app.command("status")(status)
app.command("top")(top)
report_app.command("teams")(report_teams)
report_app.command("contention")(report_contention)
report_app.command("congestion")(report_congestion)

TRACE_DIR_ENV = "GPUPOOL_TRACE_DIR"
DEFAULT_TRACE_DIR = Path("../shared/data/openb")
NODES_FILE = "openb_node_list_gpu_node.csv"


def trace_dir() -> Path:
    """Where the openb trace lives: ``$GPUPOOL_TRACE_DIR`` or ``../shared/data/openb``."""
    return Path(os.environ.get(TRACE_DIR_ENV, DEFAULT_TRACE_DIR))


@bench_app.command("placement")
def bench_placement(
    nodes: Annotated[Path, typer.Option(help="openb node list CSV.")],
    pods: Annotated[Path, typer.Option(help="openb pod list CSV.")],
    policy: Annotated[
        str, typer.Option(help="random, dotprod, clustering, packing, bestfit, fgd or default.")
    ] = "default",
    seeds: Annotated[str, typer.Option(help="Seeds: 42-51, 42,43 or 42.")] = "42-51",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of the curve here.")] = None,
    jobs: Annotated[int, typer.Option(help="Worker processes (default: usable cores).")] = 0,
    tune_ratio: Annotated[
        float, typer.Option(help="Inflate arrivals to this share of GPU capacity.")
    ] = 1.3,
    breakdown: Annotated[
        bool,
        typer.Option(
            help="Split unallocated GPUs at arrived = 100% by cause, with the LP floor of the "
            "placed shares (needs scipy)."
        ),
    ] = True,
) -> None:
    """Replay an openb trace with the published protocol and report unallocated GPUs."""
    from gpupool.cli.progress import seed_progress
    from gpupool.scheduling.registry import policy_names
    from gpupool.sim.machine import usable_cores
    from gpupool.sim.replay.sweep import PlacementJob, placement_report, run_seeds

    if policy not in policy_names():
        raise fail(
            f"--policy: unknown policy {policy!r}; choose one of {', '.join(policy_names())}"
        )
    try:
        seed_list = parse_seeds(seeds)
    except SeedsError as exc:
        raise fail(f"--seeds: {exc}") from None
    if tune_ratio <= 0:
        raise fail("--tune-ratio: must be > 0")
    for option, path in (("--nodes", nodes), ("--pods", pods)):
        if not path.is_file():
            raise fail(f"{option}: no such file {path}")
    if breakdown and importlib.util.find_spec("scipy") is None:
        raise fail(
            "--breakdown: the LP floor needs scipy (pip install 'gpupool[reports]'); "
            "or pass --no-breakdown"
        )
    workers = jobs if jobs > 0 else usable_cores()
    placement_jobs = [
        PlacementJob(nodes, pods, policy, seed, tune_ratio, breakdown=breakdown)
        for seed in seed_list
    ]
    from gpupool.sim.trace import TraceFormatError

    try:
        with seed_progress(seed_list, f"{policy} on {pods.name}") as progress:
            outcomes = run_seeds(placement_jobs, min(workers, len(seed_list)), progress)
    except TraceFormatError as exc:
        raise fail(str(exc)) from None
    report = placement_report(placement_jobs, outcomes)
    _print_placement(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
        typer.echo(f"wrote {json_out}", err=True)
    if plot is not None:
        from gpupool.sim.replay.plot import plot_unallocated

        plot_unallocated(
            {report["policy"]: report["curves"]["unallocated_pct"]},
            plot,
            f"{report['trace']}: unallocated GPUs, {len(seed_list)} seed(s)",
        )
        typer.echo(f"wrote {plot}", err=True)


def _print_placement(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    seeds = ", ".join(str(seed) for seed in report["seeds"])
    table = Table(title=f"{report['policy']} on {report['trace']} (seeds {seeds})")
    table.add_column("arrived %", justify="right")
    table.add_column("unallocated % (mean ± sd)", justify="right")
    table.add_column("frag amount % (mean ± sd)", justify="right")
    for pct, cell in report["unallocated_pct"].items():
        table.add_row(pct, _mean_sd(cell), _mean_sd(report["frag_amount_pct"][pct]))
    console = Console()
    console.print(table)
    if report["unallocated_breakdown_at_100"] is not None:
        console.print(_breakdown_table(report["unallocated_breakdown_at_100"]))
    walls = sorted(report["wall_seconds_per_run"])
    console.print(f"wall seconds per run: median {walls[len(walls) // 2]:.2f}, max {walls[-1]:.2f}")


BREAKDOWN_ROWS = (
    ("share_gpu_free_pct", "(a) free on GPUs hosting shares"),
    ("share_gpu_free_on_short_pct", "    of which on nodes short of CPU/memory"),
    ("share_floor_pct", "    LP floor of (a) for the placed shares"),
    ("short_node_free_pct", "(b) whole GPUs on nodes short of CPU/memory"),
    ("other_free_pct", "(c) other whole free GPUs"),
    ("unallocated_pct", "unallocated = (a) + (b) + (c)"),
    ("failed_share_pct", "(d) failed share volume"),
    ("failed_gpu_pct", "    failed GPU volume, all pods"),
)


def _breakdown_table(section: dict[str, Any]) -> Table:
    from rich.table import Table

    table = Table(title="Unallocated GPUs at arrived = 100%, by cause (% of capacity)")
    table.add_column("part")
    table.add_column("mean ± sd", justify="right")
    for key, label in BREAKDOWN_ROWS:
        table.add_row(label, _mean_sd(section[key]))
    table.add_row("failed shares (count)", _mean_sd(section["failed_shares"]))
    return table


def _mean_sd(cell: dict[str, Any]) -> str:
    if cell["mean"] is None:
        return "n/a"
    return f"{cell['mean']:.2f} ± {cell['sd']:.2f}"


@bench_app.command("summary")
def bench_summary(
    seed: Annotated[int, typer.Option(help="Seed of the replay.")] = 42,
    policy: Annotated[str, typer.Option(help="Placement policy.")] = "default",
) -> None:
    """Replay the default openb trace once and summarise the placement (load, fill, failures)."""
    from gpupool.cli.summary import run_summary

    nodes, pods = _default_trace()
    run_summary(nodes, pods, policy, seed)


@app.command()
def demo(
    port: Annotated[int, typer.Option(help="Dashboard port on 127.0.0.1.")] = 8080,
    speed: Annotated[float, typer.Option(help="Simulated seconds per real second.")] = 60.0,
    seed: Annotated[int, typer.Option(help="Seed of the bundled workload.")] = 0,
    duration: Annotated[
        float, typer.Option(help="Stop after this many real seconds (0: run until Ctrl-C).")
    ] = 0.0,
    dashboard: Annotated[bool, typer.Option(help="Serve the dashboard.")] = True,
    kube: Annotated[
        bool,
        typer.Option(
            help="Run on a local control plane (etcd, kube-apiserver, kwok, the agent) instead."
        ),
    ] = False,
) -> None:
    """Run the control plane on the embedded simulated cluster, with the dashboard."""
    from rich.console import Console

    from gpupool.cli.demo import run_demo

    if not 0 < port < 65536:
        raise fail(f"--port: must be 1..65535, got {port}")
    if speed <= 0:
        raise fail(f"--speed: must be > 0, got {speed}")
    if duration < 0:
        raise fail(f"--duration: must be >= 0, got {duration}")
    try:
        if kube:
            from gpupool.devcluster.binaries import MissingBinariesError
            from gpupool.devcluster.kube_demo import run_kube_demo

            try:
                run_kube_demo(port, speed, seed, duration, typer.echo)
            except MissingBinariesError as error:
                raise fail(f"--kube: {error}") from None
        else:
            run_demo(port, speed, seed, duration, dashboard, Console())
    except OSError as error:
        raise fail(f"--port: cannot serve on 127.0.0.1:{port}: {error}") from None


@app.command()
def explain(
    pod: Annotated[
        str | None,
        typer.Argument(help="A pending pod (NAME or NAMESPACE/NAME) of a running control plane."),
    ] = None,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of POD given as NAME.")
    ] = "default",
    server: ServerOption = "",
    token: TokenOption = "",
    ca_file: CaOption = "",
    at_percent: Annotated[
        float, typer.Option(help="Without POD: arrived load to replay to first.")
    ] = 60.0,
    seed: Annotated[int, typer.Option(help="Without POD: seed of the replay.")] = 42,
    top: Annotated[int, typer.Option(help="Without POD: how many candidate nodes to show.")] = 5,
) -> None:
    """Why POD is pending (live); without POD: a replay of where the next pod would go.

    With POD, asks a running control plane (--server) for the pod's reason, queue position and
    what would have to free up. Without it, replays the default trace to --at-percent and shows
    where the default policy would put the next pod, and why.
    """
    from rich.console import Console

    from gpupool.cli.explain import run_explain
    from gpupool.cli.face import explain_pod

    if pod is not None:
        explain_pod(pod, namespace, server, token, ca_file)
        return

    if not 0 <= at_percent <= 130:
        raise fail("--at-percent: must be between 0 and 130")
    if top < 1:
        raise fail("--top: must be >= 1")
    nodes, pods = _default_trace()
    run_explain(nodes, pods, seed, at_percent, top, Console())


def _default_trace() -> tuple[Path, Path]:
    directory = trace_dir()
    nodes, pods = directory / NODES_FILE, directory / "openb_pod_list_default.csv"
    for path in (nodes, pods):
        if not path.is_file():
            raise fail(
                f"trace file {path} not found; set {TRACE_DIR_ENV} to the folder "
                "holding the openb CSV files"
            )
    return nodes, pods


def main() -> None:
    """Console-script entry point."""
    app()
