"""``/healthz``, ``/readyz`` and ``/metrics`` of a running ``gpupool control-plane``.

Two replicas on one Lease, pods bound and one left pending: the leader's metrics must hold the
binds, the attempts and the pending pod by reason, the standby must be ready and say so, and
promtool (Prometheus's own linter, from Debian's prometheus package:
``scripts/install-promtool.sh``) must accept the exposition. A missing promtool fails the test.
A pod kept off a free GPU by another class's backfill reservation is charged to that class in
``gpupool_pending_seconds_imposed_total`` and ``/api/v1/congestion`` (docs/congestion.md).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.agent.fakenvml import FakeNvml
from gpupool.agent.handoff import HandoffConfig
from gpupool.agent.nvml import ProcessUsage
from gpupool.agent.service import Agent, AgentConfig
from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import KubeAPI

from .live_helpers import (
    Json,
    NoKubelet,
    SchedulerProcesses,
    create_pods,
    gpu_pod,
    list_pods,
    make_nodes,
    pending_reason,
    two_bound_one_pending,
    wait_for,
)

P = "gpupool_scheduler_"


def _promtool() -> Path:
    configured = os.environ.get("GPUPOOL_PROMTOOL")
    path = (
        Path(configured)
        if configured
        else Path.home() / ".cache" / "gpupool" / "tools" / "bin" / "promtool"
    )
    if not path.is_file():
        pytest.fail(
            f"promtool not found at {path}: run scripts/install-promtool.sh (make test does)"
        )
    return path


async def _promtool_accepts(text: str) -> None:
    lint = await asyncio.to_thread(
        subprocess.run,
        [str(_promtool()), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert lint.stdout + lint.stderr == ""  # not even a lint warning


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float],
    name: str,
    prefix: str = P,
    **labels: str,
) -> float:
    return samples[(prefix + name, frozenset(labels.items()))]


async def test_metrics_health_and_readiness_of_leader_and_standby(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    leader_url = await two_bound_one_pending(api, namespace, schedulers)
    schedulers.start("two")
    standby_url = await schedulers.http_url("two")

    async with httpx2.AsyncClient(timeout=10) as http:

        async def ready(url: str) -> bool:
            return (await http.get(f"{url}/readyz")).status_code == 200

        await wait_for(lambda: ready(standby_url), 30, "the standby's caches to sync")
        assert (await http.get(f"{leader_url}/healthz")).text == "ok\n"
        assert (await http.get(f"{leader_url}/readyz")).text == "ok: leader\n"
        assert (await http.get(f"{standby_url}/readyz")).text == "ok: standby\n"

        response = await http.get(f"{leader_url}/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = response.text
        standby_text = (await http.get(f"{standby_url}/metrics")).text
        openmetrics = await http.get(
            f"{leader_url}/metrics", headers={"Accept": "application/openmetrics-text"}
        )
        assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
        assert openmetrics.text.rstrip().endswith("# EOF")

    samples = _samples(text)
    assert _value(samples, "binds_total") == 2
    assert _value(samples, "schedule_attempts_total", result="scheduled") == 2
    assert _value(samples, "schedule_attempts_total", result="unschedulable") >= 1
    assert _value(samples, "schedule_attempts_total", result="error") == 0
    assert _value(samples, "pending_pods", reason="insufficient_resources") == 1
    assert _value(samples, "pending_pods", reason="not_tried") == 0
    assert _value(samples, "scheduling_duration_seconds_count") >= 3
    assert _value(samples, "scheduling_duration_seconds_bucket", le="+Inf") >= 3
    assert _value(samples, "bind_errors_total", reason="conflict") == 0
    assert _value(samples, "leader") == 1
    assert _value(samples, "allocation_conflicts_total") == 0
    assert _value(samples, "relists_total", resource="pods") >= 0
    labels = {name for key, pairs in samples if key.startswith(P) for name, _ in pairs}
    assert labels == {"result", "reason", "resource", "le"}  # never a pod or a namespace
    # governance: counters by rule; per-pod idle seconds only for pods idle now (none here)
    assert _value(samples, "reclaims_total", prefix="gpupool_governance_", rule="idle") == 0
    assert not [key for key, _ in samples if key.endswith("pod_idle_seconds")]
    standby = _samples(standby_text)
    assert _value(standby, "leader") == 0
    assert _value(standby, "binds_total") == 0

    await _promtool_accepts(text)


def test_a_taken_http_address_fails_the_process_naming_it(
    control_plane: LocalControlPlane,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpupool",
                "control-plane",
                "--kubeconfig",
                str(control_plane.kubeconfig),
                "--http-address",
                address,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert f"error: --http-address {address}: Address already in use" in done.stderr
    assert "Traceback" not in done.stderr


async def test_contention_an_agent_publishes_reaches_metrics_and_the_api(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses, tmp_path: Path
) -> None:
    """Two shares of one GPU, one asking for 30 % and one for 90 %: the fake NVML measures them
    at 25 % and 75 %, the agent publishes the GPU as contended on its Node, and the control plane
    shows it on /metrics, /api/v1/contention, the dashboard and ``gpupool report contention``,
    the pods named."""
    (node,) = await make_nodes(api, namespace, 1, gpus=1)
    shares = [
        gpu_pod(name, cores=50, memory_mib=1000, selector={"test": namespace}) for name in "ab"
    ]
    await create_pods(api, namespace, shares)
    schedulers.start("one", args=("--insecure-local",))
    url = await schedulers.http_url("one")

    async def bound() -> bool:
        return all(p["spec"].get("nodeName") for p in await list_pods(api, namespace))

    await wait_for(bound, 60, "both shares bound")
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await list_pods(api, namespace)}
    for pid, name in ((101, "a"), (102, "b")):  # the processes' cgroups name their pods
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "cgroup").write_text(f"0::/kubepods/pod{uids[name]}/c\n")
    nvml = FakeNvml.preset("h100", node.name)
    gpu = f"GPU-{node.name}-0"
    nvml.set_processes(gpu, [ProcessUsage(gpu, 101, 1000, 30), ProcessUsage(gpu, 102, 1000, 90)])
    config = AgentConfig(
        HandoffConfig(node.name, tmp_path / "cdi", tmp_path / "state"), proc_root=tmp_path / "proc"
    )
    agent = Agent(config, nvml, api, NoKubelet())
    await agent.sample()
    await agent.publish_usage()

    async with httpx2.AsyncClient(timeout=10) as http:

        async def shown() -> bool:
            text = (await http.get(f"{url}/metrics")).text
            return "gpupool_share_slowdown_ratio{" in text

        await wait_for(shown, 30, "the contention to reach /metrics")
        text = (await http.get(f"{url}/metrics")).text
        body = (await http.get(f"{url}/api/v1/contention")).json()
        panel = (await http.get(f"{url}/ui/live")).text
    report = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "gpupool", "report", "contention", "--server", url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert report.returncode == 0, report.stderr
    (row,) = [line for line in report.stdout.splitlines() if f"{node.name}/0" in line]
    assert "high" in row
    assert f"{namespace}/a 4x" in row
    assert f'data-gpu="{node.name}/0" data-level="high"' in panel  # the dashboard's panel
    assert f'data-pod="{namespace}/a" data-slowdown="4.0"' in panel
    await _promtool_accepts(text)
    samples = _samples(text)
    score = _value(samples, "gpupool_gpu_contention_score", "", node=node.name, gpu="0")
    assert score == 0.75  # a gets a quarter of what it could use: it loses three quarters
    slowed = {"namespace": namespace, "node": node.name, "gpu": "0"}
    assert _value(samples, "gpupool_share_slowdown_ratio", "", pod="a", **slowed) == 4.0
    assert _value(samples, "gpupool_share_slowdown_ratio", "", pod="b", **slowed) == 1.333
    (contended,) = body["gpus"]
    assert (contended["node"], contended["gpu"], contended["uuid"]) == (node.name, 0, gpu)
    assert contended["level"] == "high"
    assert [(s["pod"], s["slowdown"]) for s in contended["shares"]] == [
        (f"{namespace}/a", 4.0),
        (f"{namespace}/b", 1.333),
    ]
    assert body["class_share"] == {"": 1.0}  # neither pod names a class


def _classed(
    name: str, gpus: int, workload_class: str, runtime: str, selector: dict[str, str]
) -> Json:
    pod = gpu_pod(name, gpus=gpus, selector=selector)
    pod["metadata"]["labels"] = {"gpupool.io/class": workload_class}
    pod["metadata"]["annotations"]["gpupool.io/expected-runtime"] = runtime
    return pod


async def test_a_reservation_wait_is_charged_to_the_holders_class_in_the_api_and_metrics(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    """A 4-GPU node runs a 3-GPU ``inference`` pod (10 minutes expected); a 4-GPU ``training``
    pod then holds the node's backfill reservation, so a 1-GPU ``dev`` pod expected to run
    10 hours waits with "backfill: would delay" though a GPU is free. ``/api/v1/congestion``
    and ``/metrics`` must charge that wait to ``training`` (the holder), under ``reservation``,
    and nothing to ``dev`` (the waiter)."""
    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=4)
    schedulers.extra_args = ("--insecure-local",)  # the test reads the face from loopback
    schedulers.start("one")
    url = await schedulers.http_url("one")
    await create_pods(api, namespace, [_classed("hold", 3, "inference", "600", sel)])

    async def bound() -> bool:
        return any(p["spec"].get("nodeName") for p in await list_pods(api, namespace))

    await wait_for(bound, 60, "the 3-GPU pod bound")
    await create_pods(api, namespace, [_classed("big", 4, "training", "3600", sel)])
    await wait_for(lambda: _told(api, namespace, "big", ""), 30, "the 4-GPU pod told why")
    await create_pods(api, namespace, [_classed("small", 1, "dev", "36000", sel)])
    delay = "backfill: would delay"
    await wait_for(lambda: _told(api, namespace, "small", delay), 30, "the 1-GPU pod held")

    async with httpx2.AsyncClient(base_url=url, timeout=10) as http:

        async def charged() -> bool:
            body = (await http.get("/api/v1/congestion")).json()
            rows = {row["workload_class"]: row for row in body["classes"]}
            held = rows.get("training", {}).get("imposed_by_cause", {}).get("reservation", 0)
            return bool(held > 0)

        await wait_for(charged, 30, "the reservation wait charged to training")
        body = (await http.get("/api/v1/congestion")).json()
        text = (await http.get("/metrics")).text
    rows = {row["workload_class"]: row for row in body["classes"]}
    assert rows["training"]["contention_share"] == 0.0  # measured: no GPU is contended here
    assert "dev" not in rows or rows["dev"]["imposed_seconds"] == 0
    assert any(point["imposed_seconds"].get("training") for point in body["series"])
    queue = rows["training"]["queue"]
    samples = _samples(text)
    name = "gpupool_pending_seconds_imposed_total"
    labels = {"class": "training", "queue": queue, "cause": "reservation"}
    assert _value(samples, name, prefix="", **labels) > 0
    assert not [pairs for key, pairs in samples if key == name and ("class", "dev") in pairs]
    lint = await asyncio.to_thread(
        subprocess.run,
        [str(_promtool()), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert lint.stdout + lint.stderr == ""  # the new family with samples: not even a warning


async def _told(api: KubeAPI, namespace: str, name: str, start: str) -> bool:
    pod = await api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    reason = pending_reason(pod)
    return bool(reason) and reason.startswith(start)
