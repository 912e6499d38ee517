"""Live bind throughput of gpupool and kube-scheduler on one real local control plane.

The benchmark itself is :mod:`benchlib.live`; this script parses options and prints. Needs the
control-plane binaries (``scripts/build-control-plane.sh``, exported as
``GPUPOOL_CONTROLPLANE_BIN``). ``--runs`` must be even: the order of the two schedulers
alternates ABBA.

    .venv/bin/python bench/live_throughput.py --runs 4 --json out/bench/live_throughput.json
    .venv/bin/python bench/live_throughput.py --nodes 50 --pods 200 --runs 2   # a smoke run
    .venv/bin/python bench/live_throughput.py --pod-rules 0.2   # a fifth of the pods with rules
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.options import fail


def bench_live(
    nodes: Annotated[int, typer.Option(help="Fresh kwok nodes per phase.")] = 1000,
    pods: Annotated[int, typer.Option(help="One-GPU pods per phase.")] = 5000,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    runs: Annotated[
        int,
        typer.Option(
            help="Runs, each on a fresh control plane; even, as the order alternates ABBA."
        ),
    ] = 4,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node.")] = 8,
    schedulers: Annotated[
        str,
        typer.Option(
            help="Phases to run, in order, from gpupool, kube-scheduler, gpupool-claims "
            "(gpupool with --claims, each pod asking for its GPU by a ResourceClaim) and "
            "kube-scheduler-claims (the same claim pods through kube-scheduler's DRA allocator)."
        ),
    ] = "gpupool,kube-scheduler",
    concurrency: Annotated[int, typer.Option(help="Concurrent create requests.")] = 16,
    timeout: Annotated[
        float, typer.Option(help="Seconds a scheduler gets to bind every pod.")
    ] = 900.0,
    max_foreign_cpu: Annotated[
        float, typer.Option(help="Repeat a run if other processes used more of the CPUs than this.")
    ] = 0.1,
    retries: Annotated[int, typer.Option(help="Runs that may be repeated that way.")] = 3,
    gpupool_args: Annotated[
        str,
        typer.Option(help="Extra arguments for gpupool control-plane, e.g. '--log-level warning'."),
    ] = "",
    pod_rules: Annotated[
        float,
        typer.Option(
            help="Share of the pods with a required anti-affinity or a DoNotSchedule topology "
            "spread on the hostname, alternately (0.2: every fifth pod)."
        ),
    ] = 0.0,
    gangs: Annotated[
        int,
        typer.Option(
            help="Pods per PodGroup (scheduling.k8s.io/v1beta1, gang minCount) that start "
            "together, for both schedulers (0: no gangs)."
        ),
    ] = 0,
) -> None:
    """Bind throughput of gpupool and kube-scheduler on one real local control plane."""
    try:
        from benchlib.live import run_live
        from benchlib.live_config import LiveConfig
        from benchlib.live_report import format_table, report_ok
        from benchlib.live_setup import LiveBenchError

        from gpupool.devcluster.binaries import MissingBinariesError
    except ImportError as exc:
        raise fail(
            f"{exc.name} is missing; install the kube extra: pip install 'gpupool[kube]'"
        ) from None

    config = LiveConfig(
        nodes=nodes,
        pods=pods,
        gpus_per_node=gpus_per_node,
        runs=runs,
        schedulers=tuple(s.strip() for s in schedulers.split(",") if s.strip()),
        concurrency=concurrency,
        timeout=timeout,
        gpupool_args=tuple(shlex.split(gpupool_args)),
        max_foreign_cpu=max_foreign_cpu,
        retries=retries,
        pod_rules=pod_rules,
        gangs=gangs,
    )
    try:
        config.validate()
    except ValueError as exc:
        raise fail(str(exc)) from None

    def log(text: str) -> None:
        typer.echo(text, err=True)

    try:
        report = run_live(config, log)
    except (LiveBenchError, MissingBinariesError) as exc:
        raise fail(str(exc)) from None
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
        typer.echo(f"wrote {json_out}", err=True)
    typer.echo(format_table(report))
    if not report_ok(report):
        typer.echo("error: some runs failed or bound wrongly; see the report", err=True)
        raise typer.Exit(code=1)


if __name__ == "__main__":
    typer.run(bench_live)
