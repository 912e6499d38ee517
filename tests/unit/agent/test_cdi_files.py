"""CDI specs with a container's own files: written before the spec, mounted read-only, removed
with it; device nodes from a fake tree name their host files."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from gpupool.agent.cdi import files_path, remove_spec, spec, spec_path, spec_tokens, write_spec
from gpupool.agent.fakedevices import device_file_names, unused_char_major
from gpupool.agent.fakenvml import preset_devices
from gpupool.agent.grants import ContainerGrant, GpuGrant
from gpupool.agent.isolation import IsolationConfig, edits_for

SHARE = ContainerGrant("u", "ns", "p", "c", (GpuGrant("GPU-a", 3, 250, 8192, exclusive=False),))


def test_a_hami_spec_mounts_its_own_files_read_only(tmp_path: Path) -> None:
    edits = edits_for(SHARE, IsolationConfig("hami", device_root=tmp_path / "dev"))
    written = write_spec(tmp_path, "tok1", edits)
    document = json.loads(written.read_text())
    container = document["devices"][0]["containerEdits"]
    mounts = {m["containerPath"]: m for m in container["mounts"]}
    preload = mounts["/etc/ld.so.preload"]
    assert preload["options"] == ["rbind", "ro"]
    assert Path(preload["hostPath"]).parent == files_path(tmp_path, "tok1")
    assert Path(preload["hostPath"]).read_text() == "/usr/local/gpupool/libvgpu.so\n"
    limits = Path(mounts["/etc/gpupool/limits"]["hostPath"])
    assert "CUDA_DEVICE_SM_LIMIT=25" in limits.read_text().splitlines()
    assert stat.S_IMODE(limits.stat().st_mode) == 0o644  # a non-root container reads it
    nodes = {n["path"]: n.get("hostPath") for n in container["deviceNodes"]}
    assert nodes["/dev/nvidia3"] == str(tmp_path / "dev" / "nvidia3")
    assert spec_tokens(tmp_path) == {"tok1"}  # the files' folder is no spec
    remove_spec(tmp_path, "tok1")
    assert not spec_path(tmp_path, "tok1").exists()
    assert not files_path(tmp_path, "tok1").exists()


def test_two_containers_never_share_a_file(tmp_path: Path) -> None:
    edits = edits_for(SHARE, IsolationConfig("hami"))
    sources = []
    for token in ("a", "b"):
        container = json.loads(write_spec(tmp_path, token, edits).read_text())
        mounts = container["devices"][0]["containerEdits"]["mounts"]
        sources.append({m["hostPath"] for m in mounts if m["containerPath"].startswith("/etc/")})
    assert not sources[0] & sources[1]


def test_a_spec_with_files_needs_their_folder() -> None:
    with pytest.raises(ValueError, match="container files needs the folder"):
        spec("t", edits_for(SHARE, IsolationConfig("hami")))


def test_the_device_tree_has_the_drivers_names_and_minors(tmp_path: Path) -> None:
    names = device_file_names(preset_devices("t4", "n"))
    assert names == {
        "nvidiactl": 255,
        "nvidia-uvm": 254,
        "nvidia-uvm-tools": 253,
        **{f"nvidia{i}": i for i in range(4)},
    }


def test_the_fake_major_is_one_no_driver_registered(tmp_path: Path) -> None:
    devices = tmp_path / "devices"
    devices.write_text("Character devices:\n  1 mem\n240 a\n241 b\n\nBlock devices:\n242 c\n")
    assert unused_char_major(devices) == 242  # a block major does not count
    devices.write_text("Character devices:\n" + "".join(f"{m} x\n" for m in range(240, 255)))
    with pytest.raises(RuntimeError, match="no free experimental character major"):
        unused_char_major(devices)
