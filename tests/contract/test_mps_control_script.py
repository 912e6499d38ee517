"""The chart's ``mps-control`` container feeds the agent's limits to the MPS control daemon.

Its script runs here under ``sh`` with a stand-in ``nvidia-cuda-mps-control`` on ``PATH`` (the
real one needs a GPU) that records every command it is given and answers ``get_server_list``
with two server PIDs: the defaults must reach the daemon, each running server must get the same
limits under its PID, and a changed file must be applied again.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from gpupool.agent.fakenvml import preset_devices
from gpupool.agent.grants import ContainerGrant, GpuGrant
from gpupool.agent.isolation import IsolationConfig
from gpupool.agent.mps import publish

from .conftest import Render
from .test_helm_chart import find

STAND_IN = """#!/bin/sh
while read -r line; do
  echo "$line" >> "$LOG"
  [ "$line" = get_server_list ] && printf '101\\n202\\n'
done
exit 0
"""


def _script(render: Render, root: Path) -> str:
    daemonset = find(render(), "DaemonSet", "gpupool-agent")
    containers = daemonset["spec"]["template"]["spec"]["containers"]
    (control,) = [c for c in containers if c["name"] == "mps-control"]
    assert control["command"] == ["/bin/sh", "-c"]
    return str(control["args"][0]).replace("/run/gpupool/mps", str(root))


def _share(milli: int, memory: int) -> ContainerGrant:
    return ContainerGrant("p", "ns", "p", "c", (GpuGrant("GPU-n-3", 3, milli, memory, False),))


def _applied(log: Path, lines: list[str], timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = log.read_text().splitlines() if log.exists() else []
        if all(line in seen for line in lines):
            return seen
        time.sleep(0.2)
    raise AssertionError(f"not applied: {lines}; the daemon got {seen}")


def test_the_daemon_gets_the_agents_limits_and_each_server_too(
    render: Render, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "nvidia-cuda-mps-control"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    log = tmp_path / "daemon.log"
    config = IsolationConfig("mps", mps_root=tmp_path)
    devices = preset_devices("h100", "n")
    publish(config, [_share(250, 8192)], devices)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log)}
    script = subprocess.Popen(["/bin/sh", "-c", _script(render, tmp_path)], env=env)
    try:
        _applied(
            log,
            [
                "set_default_active_thread_percentage 25",
                "set_default_device_pinned_mem_limit 3 8192M",
                "set_active_thread_percentage 101 25",
                "set_active_thread_percentage 202 25",
                "set_device_pinned_mem_limit 202 3 8192M",
            ],
        )
        publish(config, [_share(250, 8192), _share(600, 4096)], devices)  # a larger share
        _applied(
            log, ["set_default_active_thread_percentage 60", "set_active_thread_percentage 101 60"]
        )
    finally:
        script.kill()
        script.wait()
