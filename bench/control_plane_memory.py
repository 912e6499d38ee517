"""Peak memory of a local control plane while it fills with 5,000 GPU nodes and 50,000 bound pods.

Sizing question behind it: how much RAM do etcd, kube-apiserver, kwok and the scheduler need for
a cluster of this size (a developer laptop, a CI runner)? The script starts one control plane,
samples the resident set (``VmRSS``) of every process every ``--interval`` seconds, and at the
end also reads the kernel's own high-water mark (``VmHWM``, which no sampling can miss). Phases:
idle, nodes (created and Ready), scheduler start, pods (created while the scheduler binds),
binding (until the last pod is bound), settled (a quiet spell after).

The scheduler is gpupool's (``gpupool control-plane``) when it is installed, else
kube-scheduler; the JSON says which. Pods ask for one GPU each; nodes default to 16 GPUs so that
50,000 pods fit on 5,000 nodes with room to spare.

    .venv/bin/python bench/control_plane_memory.py --json out/bench/control_plane_memory.json
    .venv/bin/python bench/control_plane_memory.py --nodes 500 --pods 5000   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchlib.binds import BindTimes
from benchlib.live_setup import (
    GPUPOOL,
    GPUPOOL_PROCESS,
    KUBE_SCHEDULER,
    bench_nodes,
    create_namespace,
    create_pods,
    gpupool_scheduler_available,
    pod_manifest,
    start_scheduler,
)
from benchlib.procstats import proc_cpu_seconds, proc_status_kib

from gpupool.devcluster.binaries import find_binaries
from gpupool.devcluster.controlplane import LocalControlPlane, SchedulerClient
from gpupool.devcluster.fakenodes import create_nodes
from gpupool.devcluster.session import wait_nodes_ready
from gpupool.kube.client.api import KubeAPI
from gpupool.sim.provenance import provenance

NAMESPACE = "bench-memory"


def mib(kib: int | None) -> float | None:
    return None if kib is None else round(kib / 1024, 1)


class RssSampler(threading.Thread):
    """Polls ``VmRSS`` of every control-plane process; keeps peaks per process and per phase."""

    def __init__(self, plane: LocalControlPlane, interval: float) -> None:
        super().__init__(daemon=True)
        self.plane = plane
        self.interval = interval
        self.phase = "idle"
        self.started = time.monotonic()
        self.peak_kib: dict[str, int] = {}
        self.phase_peak_kib: dict[str, dict[str, int]] = {}
        self.series: list[dict[str, Any]] = []
        self.samples = 0
        self._stop_event = threading.Event()

    def sample(self) -> dict[str, int]:
        """Read every running process's RSS once (KiB by name) and update the peaks."""
        now: dict[str, int] = {}
        for name, child in list(self.plane.processes.items()):
            kib = proc_status_kib(child.process.pid, "VmRSS") if child.running else None
            if kib is None:
                continue
            now[name] = kib
            self.peak_kib[name] = max(kib, self.peak_kib.get(name, 0))
            phase = self.phase_peak_kib.setdefault(self.phase, {})
            phase[name] = max(kib, phase.get(name, 0))
        return now

    def run(self) -> None:
        """Sample until stopped; keep every tenth sample as the time series."""
        while not self._stop_event.is_set():
            now = self.sample()
            if self.samples % 10 == 0:  # every 5 s at the default interval
                self.series.append(
                    {
                        "t": round(time.monotonic() - self.started, 1),
                        "phase": self.phase,
                        "rss_mib": {name: mib(kib) for name, kib in now.items()},
                    }
                )
            self.samples += 1
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        """Stop sampling and wait for the thread."""
        self._stop_event.set()
        self.join()


async def workload(
    plane: LocalControlPlane,
    sampler: RssSampler,
    args: argparse.Namespace,
    scheduler: str,
    timings: dict[str, float],
) -> dict[str, Any]:
    api = KubeAPI.from_kubeconfig(plane.kubeconfig, timeout=120.0)
    try:
        began = time.monotonic()
        sampler.phase = "nodes"
        nodes = bench_nodes("mem", args.nodes, args.gpus_per_node)
        await create_nodes(api, nodes, args.concurrency)
        timings["create_nodes"] = round(time.monotonic() - began, 1)
        await wait_nodes_ready(api, args.nodes, "bench=mem", timeout=args.timeout)
        timings["nodes_ready"] = round(time.monotonic() - began, 1)
        log(f"{args.nodes} nodes Ready after {timings['nodes_ready']:.1f} s")

        sampler.phase = "scheduler-start"
        await create_namespace(api, NAMESPACE)
        watcher = BindTimes(api, NAMESPACE, args.pods)
        watch = asyncio.create_task(watcher.run())
        await asyncio.wait_for(watcher.synced.wait(), 60)
        client = SchedulerClient(qps=5000, burst=5000)
        await asyncio.to_thread(start_scheduler, plane, scheduler, client)
        process_name = GPUPOOL_PROCESS if scheduler == GPUPOOL else KUBE_SCHEDULER

        sampler.phase = "pods"
        began = time.monotonic()
        width = len(str(args.pods - 1))
        manifests = (pod_manifest(f"p-{i:0{width}d}", scheduler, None) for i in range(args.pods))
        await create_pods(api, NAMESPACE, manifests, args.concurrency)
        timings["create_pods"] = round(time.monotonic() - began, 1)
        log(
            f"{args.pods} pods created in {timings['create_pods']:.1f} s; "
            f"{len(watcher.bound)} bound so far"
        )

        sampler.phase = "binding"
        deadline = time.monotonic() + args.timeout
        while not watcher.done.is_set():
            if watch.done():
                watch.result()
                raise RuntimeError("the watch ended early")
            child = plane.processes[process_name]
            if not child.running:
                raise RuntimeError(f"{process_name} exited:\n{child.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"only {len(watcher.bound)} of {args.pods} pods bound after "
                    f"{args.timeout:.0f} s"
                )
            await asyncio.sleep(0.5)
        timings["pods_created_to_all_bound"] = round(time.monotonic() - began, 1)
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        log(f"all {args.pods} pods bound {timings['pods_created_to_all_bound']:.1f} s after start")

        sampler.phase = "settled"
        await asyncio.sleep(args.settle)
        scheduler_pid = plane.processes[process_name].process.pid
        return {
            "bound": len(watcher.bound),
            "scheduler_cpu_seconds": proc_cpu_seconds(scheduler_pid),
            "watch_events": watcher.events,
        }
    finally:
        await api.close()


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--gpus-per-node", type=int, default=16)
    parser.add_argument("--scheduler", choices=["auto", GPUPOOL, KUBE_SCHEDULER], default="auto")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--interval", type=float, default=0.5, help="RSS sampling period, s")
    parser.add_argument("--settle", type=float, default=10.0, help="quiet seconds at the end")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    for option, value in (("--nodes", args.nodes), ("--pods", args.pods)):
        if value < 1:
            parser.error(f"{option}: must be >= 1")
    if args.pods > args.nodes * args.gpus_per_node:
        parser.error("--pods: more one-GPU pods than GPUs")

    bin_dir = find_binaries()
    measured = provenance(bin_dir)  # before the run: the code that ran, not what came after
    why_not_gpupool = gpupool_scheduler_available() if args.scheduler != KUBE_SCHEDULER else None
    if args.scheduler == GPUPOOL and why_not_gpupool is not None:
        parser.error(f"--scheduler: gpupool cannot run: {why_not_gpupool}")
    scheduler = (
        args.scheduler
        if args.scheduler != "auto"
        else (GPUPOOL if why_not_gpupool is None else KUBE_SCHEDULER)
    )
    log(f"scheduler: {scheduler}")

    started = time.time()
    timings: dict[str, float] = {}
    plane = LocalControlPlane()
    sampler = RssSampler(plane, args.interval)
    outcome: dict[str, Any] = {}
    error: str | None = None
    hwm: dict[str, float | None] = {}
    try:
        plane.start()
        plane.start_kwok()
        sampler.start()
        time.sleep(3)
        outcome = asyncio.run(workload(plane, sampler, args, scheduler, timings))
    except (RuntimeError, TimeoutError) as exc:
        error = str(exc)
        log(f"FAILED: {error}")
    finally:
        sampler.stop()
        sampler.sample()
        hwm = {
            name: mib(proc_status_kib(child.process.pid, "VmHWM"))
            for name, child in plane.processes.items()
            if child.running
        }
        etcd_db = plane.folder / "etcd" / "member" / "snap" / "db"
        etcd_db_mib = round(etcd_db.stat().st_size / 2**20, 1) if etcd_db.exists() else None
        plane.stop()
    wall = round(time.time() - started, 1)
    if args.scheduler != "auto":
        choice = "asked for"
    elif scheduler == GPUPOOL:
        choice = "gpupool control-plane available"
    else:
        choice = f"gpupool not available ({why_not_gpupool}); kube-scheduler instead"
    report: dict[str, Any] = {
        "benchmark": "control_plane_memory",
        **measured,
        "nodes": args.nodes,
        "pods": args.pods,
        "gpus_per_node": args.gpus_per_node,
        "scheduler": scheduler,
        "scheduler_choice": choice,
        "complete": error is None and outcome.get("bound") == args.pods,
        "error": error,
        "peak_rss_mib_hwm": hwm,
        "peak_rss_mib_sampled": {name: mib(kib) for name, kib in sampler.peak_kib.items()},
        "peak_rss_mib_by_phase": {
            phase: {name: mib(kib) for name, kib in peaks.items()}
            for phase, peaks in sampler.phase_peak_kib.items()
        },
        "bench_process_peak_rss_mib": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
        ),
        "etcd_db_mib": etcd_db_mib,
        "seconds": timings,
        "wall_seconds": wall,
        "outcome": outcome,
        "sampling": {"interval_seconds": args.interval, "samples": sampler.samples},
        "concurrency": args.concurrency,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "series": sampler.series,
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
        log(f"wrote {args.json}")
    print(
        f"{args.pods} pods on {args.nodes} nodes, bound by {scheduler}, in {wall:.0f} s "
        f"({'complete' if report['complete'] else 'INCOMPLETE: ' + str(error)})"
    )
    print(f"{'process':>18}  {'peak RSS MiB (VmHWM)':>20}  {'sampled peak':>12}")
    for name in report["peak_rss_mib_sampled"]:
        print(
            f"{name:>18}  {hwm.get(name) or 0:>20.1f}  "
            f"{report['peak_rss_mib_sampled'][name] or 0:>12.1f}"
        )
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    return 0 if report["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
