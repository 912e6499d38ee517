"""Memory of a standby ``gpupool control-plane`` replica while 50,000 pod updates stream past it.

Why: every replica keeps its informers running so that a standby can take over warm, but only the
leader schedules. Anything a replica keeps per pod event and drops only when it schedules (a set
of changed pods that the scheduling loop empties, say) grows without bound on a replica that
stays standby for days. A timed test cannot show that; this benchmark measures it.

What it does, on one local control plane (etcd, kube-apiserver, kwok):

1. ``--nodes`` kwok nodes with ``--gpus-per-node`` GPUs, Ready.
2. The bench takes the scheduler Lease (``kube-system/gpupool-scheduler``) under its own
   identity with gpupool's :class:`~gpupool.kube.client.leader.LeaderElector` and keeps renewing it,
   so the measured replica never leads.
3. ``--pods`` pods, created already bound (``spec.nodeName``) with the allocation record a
   leader would have written, one whole GPU each; kwok runs them.
4. The measured replica starts (``--identity standby``); once its resident set is steady (the
   initial list is in) the start RSS is taken.
5. ``--rounds`` rounds: every pod is patched with a changing annotation (``--pods`` x
   ``--rounds`` updates, 50,000 by default), and ``--churn`` short-lived pods are created and
   the previous round's deleted; every other one is annotated to finish (kwok turns it
   Succeeded), so the standby also sees creates, deletes and pods that end.
6. ``VmRSS`` of the standby is read every ``--interval`` seconds throughout.

Reported: RSS at start, at the end (after ``--settle`` quiet seconds), the maximum, and the
least-squares slope of RSS against updates sent, in MiB per 10,000 updates (and against pods
created, since what a replica keeps per pod grows with pods, not patches); the Lease's holder
at the end proves the replica stayed standby. It is a benchmark, not a test: it prints numbers
and writes JSON with the git commit.

    .venv/bin/python bench/standby_memory.py --json out/bench/standby_memory.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib.live_setup import (
    bench_nodes,
    create_namespace,
    create_pods,
    pod_manifest,
    start_gpupool_scheduler,
)
from benchlib.procstats import proc_cpu_seconds, rss_mib

from gpupool.devcluster.binaries import find_binaries
from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.devcluster.processes import ManagedProcess
from gpupool.devcluster.session import wait_nodes_ready
from gpupool.kube.client.api import JsonObject, KubeAPI
from gpupool.kube.client.leader import LeaderElector, LeaseConfig
from gpupool.kube.objects import allocation
from gpupool.kube.objects.vocabulary import ANNOTATION_ALLOCATION
from gpupool.sim.provenance import provenance

NAMESPACE = "bench-standby"
HOLDER = "bench-lease-holder"
STANDBY = "gpupool-standby"
ROUND_ANNOTATION = "bench.gpupool.io/round"
FINISH_ANNOTATION = "gpupool.io/finish"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def bound_pod(name: str, node: FakeGpuNode, gpu: int, finish: bool) -> JsonObject:
    """A one-GPU gpupool pod already bound to ``node``, carrying a leader's allocation record."""
    pod = pod_manifest(name, "gpupool", None)
    record = allocation.AllocationRecord(
        node=node.name,
        kind="whole",
        gpus=(allocation.GpuShare(index=gpu, uuid=f"GPU-{node.name}-{gpu}"),),
        scheduler=HOLDER,
        time=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    annotations = {ANNOTATION_ALLOCATION: allocation.encode(record)}
    if finish:
        annotations[FINISH_ANNOTATION] = "succeeded"
    pod["metadata"]["annotations"] = annotations
    pod["spec"]["nodeName"] = node.name
    return pod


class Workload:
    """The pods and the updates: ``slot`` s (node, GPU) pairs, each used by one pod at a time."""

    def __init__(self, api: KubeAPI, nodes: list[FakeGpuNode], args: argparse.Namespace) -> None:
        self.api = api
        self.nodes = nodes
        self.args = args
        self.updates = 0
        self.creates = 0
        self.deletes = 0
        self.finishing = 0
        self.churned: list[str] = []

    def slot(self, index: int) -> tuple[FakeGpuNode, int]:
        """The (node, GPU) of slot ``index``."""
        per_node = self.args.gpus_per_node
        return self.nodes[index // per_node], index % per_node

    async def create(self, pods: Iterable[JsonObject]) -> None:
        """Create the pods and count them."""
        listed = list(pods)
        await create_pods(self.api, NAMESPACE, listed, self.args.concurrency)
        self.creates += len(listed)

    async def each(self, paths: list[str], method: str, body: JsonObject | None) -> None:
        """PATCH or DELETE every path, ``--concurrency`` at a time."""
        queue = iter(paths)

        async def worker() -> None:
            for path in queue:
                if method == "PATCH" and body is not None:
                    await self.api.patch(path, body)
                else:
                    await self.api.delete(path)

        await asyncio.gather(*(worker() for _ in range(self.args.concurrency)))

    async def round(self, number: int) -> None:
        """Delete the last churn, create new churn pods, patch every long-lived pod once."""
        base = f"/api/v1/namespaces/{NAMESPACE}/pods"
        await self.each([f"{base}/{name}" for name in self.churned], "DELETE", None)
        self.deletes += len(self.churned)
        bank = self.args.pods + (number % 2) * self.args.churn
        self.churned = [f"c-{number:04d}-{k:03d}" for k in range(self.args.churn)]
        await self.create(
            bound_pod(name, *self.slot(bank + k), finish=k % 2 == 0)
            for k, name in enumerate(self.churned)
        )
        self.finishing += (self.args.churn + 1) // 2
        patch = {"metadata": {"annotations": {ROUND_ANNOTATION: str(number)}}}
        paths = [f"{base}/p-{i:05d}" for i in range(self.args.pods)]
        await self.each(paths, "PATCH", patch)
        self.updates += len(paths)


async def steady_rss(pid: int, interval: float, timeout: float = 120.0) -> float:
    """The standby's RSS once three readings in a row agree within 1 MiB (its list is in)."""
    deadline = time.monotonic() + timeout
    readings: list[float] = []
    await asyncio.sleep(3.0)
    while time.monotonic() < deadline:
        value = rss_mib(pid)
        if value is None:
            raise RuntimeError("the standby exited during start-up")
        readings.append(value)
        if len(readings) >= 3 and max(readings[-3:]) - min(readings[-3:]) <= 1.0:
            return value
        await asyncio.sleep(interval)
    raise RuntimeError(f"the standby's RSS did not settle in {timeout:.0f} s: {readings[-5:]}")


async def measure(plane: LocalControlPlane, args: argparse.Namespace) -> dict[str, Any]:
    api = KubeAPI.from_kubeconfig(plane.kubeconfig, timeout=120.0, connections=args.concurrency)
    lease_api = KubeAPI.from_kubeconfig(plane.kubeconfig, timeout=10.0)
    elector = LeaderElector(lease_api, HOLDER, LeaseConfig())
    leading, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        leading.set()
        await release.wait()

    holding = asyncio.create_task(elector.run(hold))
    series: list[dict[str, float | None]] = []
    try:
        nodes = bench_nodes("standby", args.nodes, args.gpus_per_node)
        await create_nodes(api, nodes, args.concurrency)
        await wait_nodes_ready(api, args.nodes, "bench=standby", timeout=600.0)
        await create_namespace(api, NAMESPACE)
        await asyncio.wait_for(leading.wait(), 60.0)
        work = Workload(api, nodes, args)
        await work.create(
            bound_pod(f"p-{i:05d}", *work.slot(i), finish=False) for i in range(args.pods)
        )
        log(f"{args.nodes} nodes Ready, {args.pods} bound pods created; Lease held by {HOLDER}")

        standby = start_gpupool_scheduler(
            plane, ("--identity", "standby", "--log-level", "warning"), name=STANDBY
        )
        pid = standby.process.pid
        began = time.monotonic()
        start = await steady_rss(pid, args.interval)
        log(f"standby steady at {start:.1f} MiB after {time.monotonic() - began:.1f} s")
        sampling = asyncio.create_task(sample(pid, work, series, args.interval, began))
        for number in range(args.rounds):
            await work.round(number)
            _check_alive(standby)
            if (number + 1) % 10 == 0:
                log(f"round {number + 1}/{args.rounds}: {work.updates} updates, {rss_mib(pid)} MiB")
        await asyncio.sleep(args.settle)
        _check_alive(standby)
        end = rss_mib(pid)
        sampling.cancel()
        await asyncio.gather(sampling, return_exceptions=True)
        lease = await api.get(elector.path)
        return {
            "rss_mib": {"start": start, "end": end, "max": _max_rss(series, start, end)},
            "slope_mib_per_10k_updates": _slope(series, "updates"),
            "slope_mib_per_10k_pods_created": _slope(series, "created"),
            "updates": {
                "patches": work.updates,
                "creates": work.creates - args.pods,
                "deletes": work.deletes,
                "finishing_pods": work.finishing,
            },
            "standby_cpu_seconds": proc_cpu_seconds(pid),
            "lease_at_end": {
                "holder": lease["spec"].get("holderIdentity"),
                "transitions": lease["spec"].get("leaseTransitions"),
            },
            "seconds_feeding": round(time.monotonic() - began, 1),
            "series": series,
        }
    finally:
        release.set()
        await asyncio.gather(holding, return_exceptions=True)
        await api.close()
        await lease_api.close()


def _check_alive(process: ManagedProcess) -> None:
    if not process.running:
        raise RuntimeError(f"the standby exited:\n{process.log_tail()}")


async def sample(
    pid: int, work: Workload, series: list[dict[str, float | None]], interval: float, t0: float
) -> None:
    while True:
        series.append(
            {
                "t": round(time.monotonic() - t0, 1),
                "updates": work.updates,
                "created": work.creates - work.args.pods,
                "rss_mib": rss_mib(pid),
            }
        )
        await asyncio.sleep(interval)


def _max_rss(series: list[dict[str, float | None]], *more: float | None) -> float | None:
    values = [s["rss_mib"] for s in series] + list(more)
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _slope(series: list[dict[str, float | None]], per: str) -> float | None:
    """Least-squares MiB per 10,000 of ``per`` (``updates``, ``created``) over the samples."""
    points = [(s[per], s["rss_mib"]) for s in series if s["rss_mib"] is not None]
    xs = [float(x or 0) for x, _ in points]
    if len(set(xs)) < 2:
        return None
    fit = statistics.linear_regression(xs, [float(y or 0) for _, y in points])
    return round(fit.slope * 10_000, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--pods", type=int, default=500, help="long-lived pods, patched")
    parser.add_argument("--rounds", type=int, default=100, help="patches per pod")
    parser.add_argument("--churn", type=int, default=10, help="pods created+deleted per round")
    parser.add_argument("--interval", type=float, default=2.0, help="RSS sampling period, s")
    parser.add_argument("--settle", type=float, default=10.0, help="quiet seconds at the end")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    for option in ("nodes", "gpus_per_node", "pods", "rounds", "concurrency"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')}: must be >= 1")
    if args.churn < 0:
        parser.error("--churn: must be >= 0")
    if args.pods + 2 * args.churn > args.nodes * args.gpus_per_node:
        parser.error("--pods: pods + 2 x churn must fit on nodes x gpus-per-node GPUs")

    bin_dir = find_binaries()
    measured = provenance(bin_dir)  # before the run: the code that ran, not what came after
    started = time.time()
    outcome: dict[str, Any] = {}
    error: str | None = None
    plane = LocalControlPlane()
    try:
        plane.start()
        plane.start_kwok()
        outcome = asyncio.run(measure(plane, args))
    except (RuntimeError, TimeoutError) as exc:
        error = str(exc)
        log(f"FAILED: {error}")
    finally:
        plane.stop()
    stayed_standby = outcome.get("lease_at_end", {}).get("holder") == HOLDER
    report: dict[str, Any] = {
        "benchmark": "standby_memory",
        **measured,
        "nodes": args.nodes,
        "gpus_per_node": args.gpus_per_node,
        "pods": args.pods,
        "rounds": args.rounds,
        "churn_per_round": args.churn,
        "interval_seconds": args.interval,
        "settle_seconds": args.settle,
        "complete": error is None and stayed_standby,
        "error": error if error or stayed_standby else "the measured replica took the Lease",
        "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "wall_seconds": round(time.time() - started, 1),
        **outcome,
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
        log(f"wrote {args.json}")
    print(table(report))
    return 0 if report["complete"] else 1


def table(report: dict[str, Any]) -> str:
    """The numbers, one per line."""
    source = report["source"]
    lines = [
        f"standby gpupool replica, {report['pods']} pods x {report['rounds']} patches, "
        f"{report['churn_per_round']} pods churned per round; commit "
        f"{str(source['commit'])[:12]}{' (dirty)' if source['dirty'] else ''}",
    ]
    if "rss_mib" in report:
        rss, updates = report["rss_mib"], report["updates"]
        lines += [
            f"{'updates sent':>28}  {updates['patches']:,} patches, {updates['creates']:,} "
            f"creates, {updates['deletes']:,} deletes",
            f"{'RSS at start (after list)':>28}  {rss['start']} MiB",
            f"{'RSS at end':>28}  {rss['end']} MiB",
            f"{'RSS max':>28}  {rss['max']} MiB",
            f"{'slope':>28}  {report['slope_mib_per_10k_updates']} MiB per 10,000 updates, "
            f"{report['slope_mib_per_10k_pods_created']} MiB per 10,000 pods created",
            f"{'Lease holder at end':>28}  {report['lease_at_end']['holder']}",
        ]
    if report["error"]:
        lines.append(f"FAILED: {report['error']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
