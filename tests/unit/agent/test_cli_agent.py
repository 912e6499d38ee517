"""``gpupool agent``: bad options end with one line naming the option, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _agent(*args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "NODE_NAME"}
    return subprocess.run(
        [sys.executable, "-m", "gpupool", "agent", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--node-name: required (or set NODE_NAME)"),
        (
            ("--node-name", "n", "--isolation", "magic"),
            "--isolation: isolation mode must be one of",
        ),
        # the pods per GPU come from the node's pool, as the scheduler reads them: no flag
        (("--node-name", "n", "--max-pods-per-gpu", "4"), "No such option: --max-pods-per-gpu"),
        (("--node-name", "n", "--kubeconfig", "/nonexistent"), "--kubeconfig: no such file"),
        (("--node-name", "n", "--collect-after", "-1"), "--collect-after: must be >= 0"),
    ],
)
def test_bad_options_name_the_option(args: tuple[str, ...], message: str) -> None:
    result = _agent(*args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_fake_preset(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    result = _agent("--node-name", "n", "--kubeconfig", str(kubeconfig), "--fake-gpus", "v100")
    assert result.returncode != 0
    assert "unknown fake GPU preset 'v100'" in result.stderr
    assert "Traceback" not in result.stderr
