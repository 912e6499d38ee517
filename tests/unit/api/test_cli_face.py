"""``gpupool status``, ``explain POD``, ``top`` and ``report cost`` as a user runs them: real
subprocesses (both console scripts, ``gpupool`` and the kubectl plugin ``kubectl-gpupool``)
against a real server on loopback serving the example cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.api.app import create_face
from gpupool.api.example import example_view
from gpupool.api.serve import serving

SCRIPTS = Path(sys.executable).parent


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving(create_face(example_view(), None, insecure_local=True)) as url:
        yield url


def run(
    script: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
    )


def test_status_summarises_the_cluster(server: str) -> None:
    done = run("gpupool", "status", "--server", server)
    assert done.returncode == 0, done.stderr
    assert "4.30 of 10" in done.stdout
    assert "insufficient_resources" in done.stdout
    for team in ("vision", "nlp", "research"):
        assert team in done.stdout


def test_server_from_the_environment(server: str) -> None:
    done = run("gpupool", "status", env={"GPUPOOL_SERVER": server})
    assert done.returncode == 0, done.stderr
    assert "4.30 of 10" in done.stdout


def test_explain_a_pending_pod(server: str) -> None:
    done = run("gpupool", "explain", "vision/train-1", "--server", server)
    assert done.returncode == 0, done.stderr
    assert "2 Insufficient gpupool.io/gpu" in done.stdout
    assert "queue position: 1 of 2" in done.stdout
    assert "a100-2" in done.stdout
    assert "research/notebook-0" in done.stdout
    never = run("gpupool", "explain", "-n", "research", "big-notebook", "--server", server)
    assert "no node can ever hold it" in never.stdout


def test_explain_a_pod_that_is_not_pending(server: str) -> None:
    done = run("gpupool", "explain", "vision/train-0", "--server", server)
    assert done.returncode == 2
    assert "404" in done.stderr
    assert "not pending" in done.stderr


def test_kubectl_plugin_top_once(server: str) -> None:
    done = run("kubectl-gpupool", "top", "--once", "--server", server)
    assert done.returncode == 0, done.stderr
    lines = [
        line
        for line in done.stdout.splitlines()
        if line.startswith("│ a100") or line.startswith("│ t4")
    ]
    assert len(lines) == 10  # one row per GPU
    assert "idle" in done.stdout


def test_report_cost_without_a_store(server: str) -> None:
    done = run("kubectl-gpupool", "report", "teams", "--server", server)
    assert done.returncode == 0, done.stderr
    assert "no store configured" in done.stdout
    assert "2.50" in done.stdout  # vision holds 2.5 GPUs now


def test_no_server_is_one_line_naming_the_option() -> None:
    done = run("gpupool", "status", "--server", "http://127.0.0.1:9")
    assert done.returncode == 2
    assert done.stderr.startswith("error: --server http://127.0.0.1:9: cannot connect")
    assert "Traceback" not in done.stderr
    bad = run("gpupool", "top", "--once", "--server", "ftp://x")
    assert bad.returncode == 2
    assert "--server" in bad.stderr


def _sigint_default() -> None:
    """Let the child take Ctrl-C even when pytest runs in the background (SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_top_refreshes_until_interrupted(server: str) -> None:
    process = subprocess.Popen(
        [str(SCRIPTS / "gpupool"), "top", "--interval", "0.2", "--server", server],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=_sigint_default,
    )
    time.sleep(3)  # the first frame, then refreshes every 0.2 s
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert "vision/train-0" in out


def test_report_contention_names_the_contended_gpus_and_slowed_shares(server: str) -> None:
    done = run("gpupool", "report", "contention", "--server", server)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    (high,) = [line for line in lines if "a100-1/2" in line]
    assert "high" in high
    assert "nlp/finetune-0 2.5x" in high
    assert "share of contention by class: dev 50%, training 50%" in done.stdout
