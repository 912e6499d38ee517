"""The ``gpupool`` command as a user runs it: a real subprocess, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},32000,131072,{2 if i % 2 else 4},{'T4' if i % 2 else 'V100'}\n" for i in range(40)
)
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(
    f"p{i},{1000 + 500 * (i % 3)},2048,{1 if i % 4 else 2},{[250, 500, 1000, 1000][i % 4]},"
    f"{'T4' if i % 7 == 0 else ''}\n"
    for i in range(200)
)


def gpupool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupool", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.fixture
def tiny_trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "openb_pod_list_tiny.csv"
    nodes.write_text(NODES)
    pods.write_text(PODS)
    return nodes, pods


@pytest.mark.parametrize("policy", ["random", "fgd", "default"])
def test_bench_placement_writes_the_report(
    tiny_trace: tuple[Path, Path], tmp_path: Path, policy: str
) -> None:
    nodes, pods = tiny_trace
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    done = gpupool(
        "bench", "placement", "--nodes", str(nodes), "--pods", str(pods), "--policy", policy,
        "--seeds", "1-3", "--json", str(out), "--plot", str(plot), "--jobs", "2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["policy"] == policy
    assert report["trace"] == "tiny"
    assert report["seeds"] == [1, 2, 3]
    assert len(report["wall_seconds_per_run"]) == 3
    for metric in ("unallocated_pct", "frag_amount_pct"):
        assert set(report[metric]) == {"90", "95", "100", "110", "120", "130"}
        cell = report[metric]["100"]
        assert len(cell["per_seed"]) == 3
        assert cell["mean"] == pytest.approx(sum(cell["per_seed"]) / 3, abs=1e-3)
        assert 0 <= cell["mean"] <= 100
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "100.0%" in done.stderr  # the progress bar reached the end


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "tetris"], "--policy: unknown policy 'tetris'"),
        (["--seeds", "9-3"], "--seeds:"),
        (["--seeds", "a"], "--seeds:"),
        (["--tune-ratio", "0"], "--tune-ratio"),
    ],
)
def test_bad_options_name_the_option(
    tiny_trace: tuple[Path, Path], args: list[str], message: str
) -> None:
    nodes, pods = tiny_trace
    done = gpupool("bench", "placement", "--nodes", str(nodes), "--pods", str(pods), *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_malformed_trace_names_file_line_and_column(tiny_trace: tuple[Path, Path]) -> None:
    nodes, pods = tiny_trace
    pods.write_text(PODS.replace("p5,", "p5,-", 1).replace("p5,-1", "p5,x1", 1))
    done = gpupool("bench", "placement", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1")
    assert done.returncode == 2
    assert f"{pods}, line 7, column 'cpu_milli'" in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_trace_file(tmp_path: Path) -> None:
    done = gpupool(
        "bench", "placement", "--nodes", str(tmp_path / "no.csv"), "--pods", str(tmp_path / "x")
    )
    assert done.returncode == 2
    assert "--nodes: no such file" in done.stderr


def test_bench_summary_summarises_the_default_trace(trace_dir: Path) -> None:
    done = gpupool("bench", "summary", env={"GPUPOOL_TRACE_DIR": str(trace_dir), "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    assert "1213 GPU nodes, 6212 GPUs of 7 models" in done.stdout
    assert "Unallocated GPU capacity as load arrives" in done.stdout
    line = next(row for row in done.stdout.splitlines() if row.startswith("At 100% arrived"))
    unallocated = float(line.split(":")[1].split("%")[0])
    assert 3.0 < unallocated < 6.0
    assert "GPU fill by model" in done.stdout


def test_bench_summary_without_trace_says_where_it_looked(tmp_path: Path) -> None:
    done = gpupool("bench", "summary", env={"GPUPOOL_TRACE_DIR": str(tmp_path)})
    assert done.returncode == 2
    assert "GPUPOOL_TRACE_DIR" in done.stderr


def test_explain_shows_the_terms_behind_the_best_nodes(trace_dir: Path) -> None:
    done = gpupool(
        "explain", "--at-percent", "30", "--top", "2",
        env={"GPUPOOL_TRACE_DIR": str(trace_dir), "COLUMNS": "160"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "30% of GPU capacity arrived" in done.stdout
    assert "Best 2 nodes" in done.stdout
    rows = [line for line in done.stdout.splitlines() if "openb-node-" in line]
    assert len(rows) == 2
    for row in rows:
        cells = [cell.strip() for cell in row.strip("│┃ ").split("│")]
        before, after, kept, score, bonus, total = (float(c) for c in cells[1:7])
        assert total == pytest.approx(score + bonus, abs=1e-3)
        expected = np.trunc(100 / (1 + np.exp(-(before - after - kept))))
        assert abs(score - expected) <= 1  # the table rounds the fragmentation to 3 places


def test_explain_rejects_a_load_out_of_range() -> None:
    done = gpupool("explain", "--at-percent", "150")
    assert done.returncode == 2
    assert "--at-percent" in done.stderr


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        ([], "--kubeconfig"),
        (["--policy", "fgd"], "--policy"),
        (["--bind-concurrency", "0"], "--bind-concurrency"),
        (["--backfill", "eager"], "--backfill: 'eager' is not one of large-pods, easy, strict"),
        (["--lease-duration", "5", "--renew-deadline", "6"], "--renew-deadline"),
        (["--log-level", "loud"], "--log-level"),
        (["--http-address", "0.0.0.0:9402"], "--http-address: 0.0.0.0 is not loopback"),
        (["--tls-cert", "cert.pem"], "--tls-cert/--tls-key: give both"),
        (["--tls-cert", "no.pem", "--tls-key", "no.key"], "--tls-cert/--tls-key: no.pem"),
        (
            ["--http-address", "0.0.0.0:9402", "--no-api", "--insecure-local"],
            "--insecure-local: only with a loopback",
        ),
        (["--api-audience", ""], "--api-audience"),
        (["--serving-pod", "scheduler-0"], "--serving-pod: expected NAMESPACE/NAME"),
        (["--serving-pod", "ns/a/b"], "--serving-pod: expected NAMESPACE/NAME"),
    ],
)
def test_control_plane_bad_options_name_the_option(
    tmp_path: Path, extra: list[str], option: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if extra:
        kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    result = gpupool("control-plane", "--kubeconfig", str(kubeconfig), *extra)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert option in result.stderr
    assert "Traceback" not in result.stderr


def test_bench_placement_splits_unallocated_gpus_at_100(
    tiny_trace: tuple[Path, Path], tmp_path: Path
) -> None:
    nodes, pods = tiny_trace
    out = tmp_path / "r.json"
    args = ["--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-2", "--jobs", "1"]
    done = gpupool("bench", "placement", *args, "--json", str(out), env={"COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    assert "Unallocated GPUs at arrived = 100%, by cause" in done.stdout
    section = json.loads(out.read_text())["unallocated_breakdown_at_100"]
    assert len(section["per_seed_milli"]) == 2
    for milli in section["per_seed_milli"]:
        parts = milli["share_gpu_free"] + milli["short_node_free"] + milli["other_free"]
        assert parts == milli["unallocated"]
        assert milli["share_gpu_free"] + 1e-6 >= milli["share_floor"]
    for part in ("share_gpu_free_pct", "short_node_free_pct", "unallocated_pct"):
        assert len(section[part]["per_seed"]) == 2
        assert 0 <= section[part]["mean"] <= 100

    done = gpupool("bench", "placement", *args, "--no-breakdown", "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["unallocated_breakdown_at_100"] is None
    assert "by cause" not in done.stdout


def test_demo_runs_the_embedded_control_plane_and_summarises_it() -> None:
    done = gpupool(
        "demo", "--no-dashboard", "--duration", "1.5", "--speed", "600", env={"COLUMNS": "120"}
    )
    assert done.returncode == 0, done.stderr
    assert "GPU units allocated" in done.stdout
    for queue in ("vision", "nlp", "serving", "research"):
        assert queue in done.stdout
    assert "pending x" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "0"], "--port: must be 1..65535"),
        (["--speed", "0"], "--speed: must be > 0"),
        (["--duration", "-1"], "--duration: must be >= 0"),
    ],
)
def test_demo_option_errors_name_the_option(args: list[str], message: str) -> None:
    done = gpupool("demo", *args)
    assert done.returncode == 2
    assert message in done.stderr
