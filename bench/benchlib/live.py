"""Live scheduling throughput: gpupool's scheduler against kube-scheduler on one real control plane.

The simulator's speed says how fast the policy decides; this says how fast pods get bound in a
real cluster, where every decision is a Binding through the API server and the scheduler first
has to list and watch everything. Both schedulers get the same conditions in the same run: a
fresh etcd + kube-apiserver + kwok, N fresh kwok nodes with 8 GPUs, P identical pods asking for
one GPU each (:mod:`benchlib.live_setup`), all created *before* the scheduler starts (so
creation speed does not cap the rate). The clock starts when the scheduler process is launched,
so start-up, the initial list and cache sync are part of the number, as they are when a
scheduler restarts in a real cluster; the rate from the first to the last bind is reported too.

Bind times come from the project's informer on the namespace (:mod:`benchlib.binds`). The
gpupool phase also checks what it bound with the checker the tests use
(:mod:`benchlib.allocation_check`).

Between the two phases the first phase's pods and nodes are deleted, so both schedulers see a
cluster of the same size (kube-scheduler's adaptive ``percentageOfNodesToScore`` depends on the
node count). The second phase meets an etcd and a kwok that have seen the first, so the order
alternates ABBA (:func:`phase_order`) over an even number of runs: each scheduler goes first in
exactly half of them, and a drift over the session (a warming cache, a slowing VM) falls on both
alike. The report and its verdict are :mod:`benchlib.live_report`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import httpx2

from benchlib.live_config import LiveConfig, phase_order
from benchlib.live_phase import Log, PhaseResult, run_phase
from benchlib.live_report import iso, live_report
from benchlib.live_setup import (
    GPUPOOL_PHASES,
    LiveBenchError,
    delete_phase,
    gpupool_scheduler_available,
    phase_label,
)
from benchlib.procstats import peak_rss_mib
from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.devcluster.processes import StartError
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.sim.provenance import provenance, source_state


async def _run_phases(
    plane: LocalControlPlane, config: LiveConfig, order: Sequence[str], log: Log
) -> tuple[dict[str, PhaseResult], dict[str, float]]:
    api = KubeAPI.from_kubeconfig(plane.kubeconfig, timeout=120.0)
    results: dict[str, PhaseResult] = {}
    cleanups: dict[str, float] = {}
    try:
        for index, scheduler in enumerate(order):
            results[scheduler] = await run_phase(plane, api, scheduler, config, log)
            if index + 1 < len(order):
                label = phase_label(scheduler)
                began = time.monotonic()
                await delete_phase(api, f"bench-{label}", label)
                cleanups[scheduler] = round(time.monotonic() - began, 3)
                log(f"{scheduler}: pods and nodes deleted in {cleanups[scheduler]:.1f} s")
    finally:
        await api.close()
    return results, cleanups


def run_once(config: LiveConfig, attempt: int, order: Sequence[str], log: Log) -> dict[str, Any]:
    """One run on a fresh control plane (etcd, kube-apiserver, kwok), the phases in ``order``."""
    started = time.time()
    load = os.getloadavg()
    source = source_state()
    plane = LocalControlPlane()
    try:
        plane.start()
        plane.start_kwok()
        log(
            f"run {attempt} ({' then '.join(order)}): control plane up in "
            f"{time.time() - started:.1f} s ({plane.folder})"
        )
        results, cleanups = asyncio.run(_run_phases(plane, config, order, log))
        peaks = peak_rss_mib(plane)
    finally:
        plane.stop()
    return {
        "run": attempt,
        "started": iso(started),
        "wall_seconds": round(time.time() - started, 1),
        "loadavg_before": [round(x, 2) for x in load],
        "source": source,
        "order": list(order),
        "phases": {name: asdict(result) for name, result in results.items()},
        "cleanup_seconds": cleanups,
        "control_plane_peak_rss_mib": peaks,
    }


def run_live(config: LiveConfig, log: Log) -> dict[str, Any]:
    """Every run, in ABBA order, then the report.

    A run set aside as disturbed is repeated in the same slot, with the same order, so the kept
    runs stay balanced.

    Raises:
        ValueError: A bad setting (the message names the option).
        LiveBenchError: gpupool was asked for and ``gpupool control-plane`` is not there.
    """
    from gpupool.devcluster.binaries import find_binaries

    config.validate()
    bin_dir = find_binaries()
    if set(GPUPOOL_PHASES) & set(config.schedulers):
        missing = gpupool_scheduler_available()
        if missing is not None:
            raise LiveBenchError(
                f"the gpupool scheduler cannot run: {missing}; "
                "use --schedulers kube-scheduler to measure kube-scheduler alone"
            )
    measured = provenance(bin_dir)
    started = time.time()
    runs: list[dict[str, Any]] = []
    disturbed: list[dict[str, Any]] = []
    attempt = 0
    while len(runs) < config.runs:
        attempt += 1
        order = phase_order(config.schedulers, len(runs))
        try:
            run = run_once(config, attempt, order, log)
        except (ApiError, StartError, TimeoutError, LiveBenchError, httpx2.HTTPError) as error:
            log(f"run {attempt}: FAILED: {error}")  # keep the other runs' numbers
            run = {
                "run": attempt,
                "order": list(order),
                "error": f"{type(error).__name__}: {error}",
                "phases": {},
            }
        foreign = max(
            (p["cpu_while_binding"].get("foreign_fraction", 0.0) for p in run["phases"].values()),
            default=0.0,
        )
        if foreign > config.max_foreign_cpu and len(disturbed) < config.retries:
            log(f"run {attempt}: other processes used {foreign:.0%} of the CPUs; running it again")
            disturbed.append(run)
            continue
        runs.append(run)
    report = live_report(config, runs, measured)
    report["disturbed_runs"] = disturbed
    report["started"] = iso(started)
    report["finished"] = iso(time.time())
    report["wall_seconds"] = round(time.time() - started, 1)
    return report
