"""Rendering the Helm chart with helm built from its Go module (scripts/build-helm.sh).

``make test`` exports ``GPUPOOL_HELM``; otherwise the newest helm in the cache is used. A missing
helm fails the tests: skipping would hide exactly what they check.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.devcluster.binaries import MissingBinariesError, find_helm

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpupool"
Render = Callable[..., list[dict[str, Any]]]


def helm_binary() -> Path:
    try:
        return find_helm()
    except MissingBinariesError as missing:
        pytest.fail(f"helm not found: {missing}")


def helm_template(
    *values: str, namespace: str = "gpupool-system"
) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart with ``--set`` values; the completed process."""
    command = [str(helm_binary()), "template", "gpupool", str(CHART), "--namespace", namespace]
    for value in values:
        command += ["--set", value]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="session")
def render() -> Render:
    def run(*values: str, namespace: str = "gpupool-system") -> list[dict[str, Any]]:
        done = helm_template(*values, namespace=namespace)
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    return run
