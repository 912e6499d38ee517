"""``gpupool demo --kube``: the demo's workload on a real local control plane, end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from gpupool.core.model import PodSpec
from gpupool.devcluster.kube_demo import pod_manifest
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import pod_spec
from gpupool.sim.demo.workload import DemoArrivals


def test_every_demo_pod_asks_the_api_for_exactly_its_simulated_request() -> None:
    arrivals = DemoArrivals(seed=5)
    submissions = arrivals.arrivals(0.0, 4 * 3600.0)
    kinds = set()
    for submission in submissions:
        namespace, manifest = pod_manifest(submission)
        manifest["metadata"].update(namespace=namespace, uid=submission.workload.pod.name)
        read = pod_spec(msgspec.convert(manifest, PodRecord))
        wanted: PodSpec = submission.workload.pod
        assert (
            read.kind,
            read.gpu_count,
            read.gpu_milli,
            read.gpu_memory_mib,
            read.mig_profile,
        ) == (
            wanted.kind,
            wanted.gpu_count,
            wanted.gpu_milli,
            wanted.gpu_memory_mib,
            wanted.mig_profile,
        )
        assert re.fullmatch(r"[a-z0-9-]+", manifest["metadata"]["name"])
        kinds.add(read.kind.value)
    assert kinds == {"whole", "share", "mig"}


def test_kube_demo_binds_and_finishes_pods(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpupool",
            "demo",
            "--kube",
            "--duration",
            "30",
            "--speed",
            "300",
            "--port",
            "18097",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if "pods created" in line]
    assert lines, done.stdout
    last = lines[-1]
    assert "Running" in last
    assert "Succeeded" in last
    assert "stopping" in done.stdout


def test_kube_demo_says_how_to_get_missing_binaries(tmp_path: Path) -> None:
    env = {**os.environ, "GPUPOOL_CONTROLPLANE_BIN": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "gpupool", "demo", "--kube", "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 2
    assert "--kube:" in done.stderr
    assert "lacks" in done.stderr


pytestmark = pytest.mark.integration
