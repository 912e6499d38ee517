"""``gpupool dev-cluster up`` and ``bench/live_throughput.py`` as a user runs them, as subprocesses.

The dev cluster must give Ready GPU nodes, and a Ctrl-C or SIGTERM must leave no etcd,
kube-apiserver, kwok or kube-scheduler behind. The live bench must bind every pod with both
schedulers, in ABBA order, and check every gpupool allocation.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from benchlib.live_setup import kube_nodes_to_find

from gpupool.kube.client.api import ApiError, KubeAPI

pytestmark = pytest.mark.integration

CONTROL_PLANE_CHILDREN = {"etcd", "kube-apiserver", "kwok"}
ALLOCATION = "gpupool.io/allocation"


def gpupool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupool", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _children(pid: int) -> dict[int, str]:
    """Direct children of ``pid`` (pid -> command name), from /proc."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if int(rest.split()[1]) == pid:
            found[int(entry.name)] = name
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class _Lines:
    """The subprocess's stdout, line by line, with a timeout."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        assert process.stdout is not None
        stream = process.stdout

        def pump() -> None:
            for line in stream:
                self.lines.put(line)
            self.lines.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def wait_for(self, prefix: str, timeout: float) -> str:
        """The next line that starts with ``prefix`` once stripped of indentation."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if line.strip().startswith(prefix):
                return line
        raise AssertionError(f"no line starting with {prefix!r}; output so far:\n{self.seen}")

    def rest(self, timeout: float = 10) -> str:
        """Everything printed until the stream closed."""
        while (line := self.lines.get(timeout=timeout)) is not None:
            self.seen.append(line)
        return "".join(self.seen)


async def _printed_scheduler_binds_and_admin_cannot_forge(admin: Path, scheduler: Path) -> None:
    """The printed scheduler command binds (as the scheduler user); the admin cannot allocate."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "demo"},
        "spec": {
            "schedulerName": "gpupool",
            "containers": [
                {"name": "main", "image": "pause", "resources": {"limits": {"gpupool.io/gpu": "1"}}}
            ],
        },
    }
    command = [
        sys.executable, "-m", "gpupool", "control-plane", "--kubeconfig", str(scheduler),
        "--http-address", "127.0.0.1:0",
    ]  # fmt: skip
    api = KubeAPI.from_kubeconfig(admin)
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as process:
        try:
            forged = {**pod, "metadata": {"name": "forged", "annotations": {ALLOCATION: "{}"}}}
            pods = "/api/v1/namespaces/default/pods"
            deadline = time.monotonic() + 30  # the API server loads a new policy within ~1 s
            while time.monotonic() < deadline:
                try:
                    await api.request("POST", pods, body=forged, params={"dryRun": "All"})
                except ApiError:
                    break
                await asyncio.sleep(0.3)
            with pytest.raises(ApiError, match="written only by the gpupool scheduler"):
                await api.create(pods, forged)
            await api.create(pods, pod)
            deadline = time.monotonic() + 60
            while not (await api.get("/api/v1/namespaces/default/pods/demo"))["spec"].get(
                "nodeName"
            ):
                assert time.monotonic() < deadline, "the printed scheduler did not bind"
                await asyncio.sleep(0.3)
            stored = await api.get("/api/v1/namespaces/default/pods/demo")
            assert ALLOCATION in stored["metadata"]["annotations"]
        finally:
            process.terminate()
            process.wait(30)
            await api.close()


@pytest.mark.parametrize(
    ("stop_signal", "scheduler_flag", "expected_children"),
    [
        (signal.SIGINT, "--no-kube-scheduler", CONTROL_PLANE_CHILDREN),
        (signal.SIGTERM, "--kube-scheduler", CONTROL_PLANE_CHILDREN | {"kube-scheduler"}),
    ],
)
async def test_dev_cluster_up_serves_ready_gpu_nodes_and_stops_cleanly(
    tmp_path: Path,
    stop_signal: signal.Signals,
    scheduler_flag: str,
    expected_children: set[str],
) -> None:
    folder = tmp_path / "dev"
    command = [
        sys.executable, "-m", "gpupool", "dev-cluster", "up", "--nodes", "3",
        "--gpus-per-node", "4", "--gpu-model", "A100", "--gpu-memory-mib", "40960",
        "--dir", str(folder), scheduler_flag,
    ]  # fmt: skip
    with (
        (tmp_path / "stderr").open("w") as stderr,
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True) as process,
    ):
        lines = _Lines(process)
        try:
            kubeconfig = Path(lines.wait_for("kubeconfig:", 120).split(":", 1)[1].strip())
            assert kubeconfig == folder / "admin.kubeconfig"
            line = lines.wait_for("scheduler kubeconfig:", 10)
            scheduler_kubeconfig = Path(line.split(":", 1)[1].split()[0])
            assert f"kubectl --kubeconfig {kubeconfig} get nodes" in lines.wait_for("kubectl", 10)
            command_line = lines.wait_for("gpupool control-plane", 10)
            assert f"--kubeconfig {scheduler_kubeconfig}" in command_line
            lines.wait_for("schedulerName: gpupool", 10)
            lines.wait_for("gpupool.io/gpu: 1", 10)

            api = KubeAPI.from_kubeconfig(kubeconfig)
            try:
                listing = await api.get("/api/v1/nodes")
                pools = await api.get("/apis/gpupool.io/v1alpha1/gpupools")  # CRDs installed
            finally:
                await api.close()
            assert pools["items"] == []
            nodes = {node["metadata"]["name"]: node for node in listing["items"]}
            assert set(nodes) == {"gpu-node-000", "gpu-node-001", "gpu-node-002"}
            for node in nodes.values():
                conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
                assert conditions["Ready"] == "True"
                assert node["status"]["allocatable"]["gpupool.io/gpu"] == "4"
                assert node["metadata"]["labels"]["gpupool.io/gpu-model"] == "A100"
                assert node["metadata"]["labels"]["gpupool.io/gpu-memory-mib"] == "40960"

            await _printed_scheduler_binds_and_admin_cannot_forge(kubeconfig, scheduler_kubeconfig)

            children = _children(process.pid)
            assert set(children.values()) == expected_children
            process.send_signal(stop_signal)
            assert process.wait(60) == 0
        finally:
            if process.poll() is None:  # a failed assertion: still stop the cluster cleanly
                process.terminate()
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        output = lines.rest()
    assert output.endswith("stopping ...\nstopped.\n")
    assert (tmp_path / "stderr").read_text() == f"dev cluster stopped ({stop_signal.name}).\n"
    leftovers = {pid: name for pid, name in children.items() if _alive(pid)}
    assert not leftovers, f"left running: {leftovers}"
    assert (folder / "kube-apiserver.log").is_file()  # --dir keeps the logs


LIVE_BENCH = Path(__file__).resolve().parents[2] / "bench" / "live_throughput.py"


def live_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LIVE_BENCH), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["dev-cluster", "up", "--nodes", "0"], "--nodes"),
        (["dev-cluster", "up", "--gpus-per-node", "-1"], "--gpus-per-node"),
        (["bench-live", "--pods", "0"], "--pods"),
        (["bench-live", "--nodes", "2", "--pods", "17"], "--pods"),
        (["bench-live", "--schedulers", "volcano"], "--schedulers"),
        (["bench-live", "--runs", "3"], "--runs"),
    ],
)
def test_bad_options_fail_with_one_line_naming_the_option(args: list[str], option: str) -> None:
    done = live_bench(*args[1:]) if args[0] == "bench-live" else gpupool(*args)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {option}:"), done.stderr
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


def test_bench_live_binds_every_pod_with_both_schedulers_in_abba_order(tmp_path: Path) -> None:
    out = tmp_path / "live.json"
    done = live_bench(
        "--nodes", "3", "--pods", "20", "--runs", "2", "--json", str(out), "--timeout", "120"
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["gpupool_pods_per_second"] > 0
    assert report["kube_scheduler_pods_per_second"] > 0
    assert report["gpupool_allocations_ok"] is True
    assert report["orders"] == [["gpupool", "kube-scheduler"], ["kube-scheduler", "gpupool"]]
    assert set(report["source"]) == {"commit", "dirty"}
    assert report["comparison"]["verdict"] in ("level", "faster", "slower")
    assert report["comparison"]["words"] in done.stdout
    for run in report["per_run"]:
        assert run["order"] in report["orders"]
        for name in ("gpupool", "kube-scheduler"):
            phase = run["phases"][name]
            assert phase["complete"], phase
            assert phase["bound"] == 20
            assert phase["node_counts"]["ok"], phase["node_counts"]
            assert phase["node_counts"]["max_pods_on_a_node"] <= 8
            assert phase["seconds_to_first_bind"] <= phase["seconds_to_last_bind"]
        allocations = run["phases"]["gpupool"]["allocations"]
        assert allocations["pods_checked"] == 20
        assert allocations["records_checked"] == 20
        assert allocations["gpus_used"] == 20
    setup = report["setup"]
    assert setup["gpupool"]["nodeSelector"] == {"bench": "gpupool"}
    assert setup["kube_scheduler"]["nodeSelector"] == {"bench": "kube"}
    assert setup["kube_scheduler"]["qps"] == 5000
    assert "gpupool" in done.stdout
    assert "kube-scheduler" in done.stdout


def test_bench_live_compares_claim_pods_with_the_same_pods_by_extended_resource(
    tmp_path: Path,
) -> None:
    """The claims phase: slices, classes and a claim per pod, bound by gpupool with --claims."""
    out = tmp_path / "live.json"
    done = live_bench(
        "--nodes", "3", "--pods", "20", "--runs", "2", "--json", str(out), "--timeout", "120",
        "--schedulers", "gpupool,gpupool-claims",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["orders"] == [["gpupool", "gpupool-claims"], ["gpupool-claims", "gpupool"]]
    assert report["gpupool_claims_pods_per_second"] > 0
    assert report["gpupool_allocations_ok"] is True
    assert report["claims_comparison"]["words"] in done.stdout
    assert "comparison" not in report  # no kube-scheduler phase ran
    for run in report["per_run"]:
        phase = run["phases"]["gpupool-claims"]
        assert phase["complete"], phase
        assert phase["node_counts"]["ok"], phase["node_counts"]
        assert phase["allocations"]["claims_checked"] == 20
        assert phase["allocations"]["claims_allocated_on_their_pods_node"] == 20


@pytest.mark.parametrize(
    ("nodes", "expected"), [(50, 50), (150, 100), (1000, 420), (5000, 500), (100_000, 5000)]
)
def test_kube_scheduler_feasible_node_count_follows_the_adaptive_rule(
    nodes: int, expected: int
) -> None:
    # numFeasibleNodesToFind: all below 100 nodes, else (50 - nodes/125)% but >= 5% and >= 100
    assert kube_nodes_to_find(nodes) == expected
