"""The MPS control daemon's limits: the largest live share, per GPU for memory."""

from __future__ import annotations

from pathlib import Path

from gpupool.agent.fakenvml import preset_devices
from gpupool.agent.grants import ContainerGrant, GpuGrant
from gpupool.agent.isolation import IsolationConfig
from gpupool.agent.mps import LIMITS_FILE, daemon_commands, publish

GPUS = preset_devices("h100", "n")


def _share(pod: str, index: int, milli: int, memory: int) -> ContainerGrant:
    gpu = GpuGrant(f"GPU-n-{index}", index, milli, memory, exclusive=False)
    return ContainerGrant(pod, "ns", pod, "c", (gpu,))


def test_the_daemon_gets_the_largest_live_share() -> None:
    grants = [_share("a", 2, 250, 8192), _share("b", 2, 400, 4096), _share("c", 5, 105, 1024)]
    assert daemon_commands(grants, GPUS).splitlines() == [
        "set_default_active_thread_percentage 40",
        "set_default_device_pinned_mem_limit 2 8192M",
        "set_default_device_pinned_mem_limit 5 1024M",
    ]


def test_a_share_rounds_up_and_whole_gpus_do_not_count() -> None:
    whole = ContainerGrant("w", "ns", "w", "c", (GpuGrant("GPU-n-1", 1),))
    commands = daemon_commands([whole, _share("a", 3, 105, 0)], GPUS).splitlines()
    # 10.5 % is given 11 %: never below the share; an uncapped share leaves its GPU unlimited
    assert commands == ["set_default_active_thread_percentage 11"]


def test_no_share_leaves_next_to_nothing_for_a_stray_client() -> None:
    assert daemon_commands([], GPUS) == "set_default_active_thread_percentage 1\n"


def test_only_mps_nodes_write_the_limits(tmp_path: Path) -> None:
    grants = [_share("a", 0, 500, 2048)]
    assert publish(IsolationConfig("hami", mps_root=tmp_path), grants, GPUS) is None
    assert not (tmp_path / LIMITS_FILE).exists()
    written = publish(IsolationConfig("mps", mps_root=tmp_path), grants, GPUS)
    assert written == tmp_path / LIMITS_FILE
    assert written.read_text() == (
        "set_default_active_thread_percentage 50\nset_default_device_pinned_mem_limit 0 2048M\n"
    )
