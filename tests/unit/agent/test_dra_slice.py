"""The ResourceSlice the agent builds from NVML: names, attributes, capacity, taints."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.agent.dra.slice import driver_semver, slice_devices, slice_object
from gpupool.agent.fakenvml import preset_devices
from gpupool.kube.objects.dra.cel_values import is_semver
from gpupool.kube.objects.quantity import MIB, binary_quantity, milli_quantity, parse_quantity


@pytest.mark.parametrize(
    ("version", "expected"),
    [("570.124.06", "570.124.6"), ("535.104.05", "535.104.5"), ("550.54", "550.54.0"),
     ("r570", None), ("570.1.2.3", None), ("", None)],
)  # fmt: skip
def test_driver_versions_become_semver_or_nothing(version: str, expected: str | None) -> None:
    assert driver_semver(version) == expected
    if expected is not None:
        assert is_semver(expected)


@pytest.mark.parametrize("mib", [1, 1023, 1024, 9856, 15360, 81559, 81920, 143771, 1 << 20])
def test_quantities_are_written_as_the_api_server_stores_them(mib: int) -> None:
    text = binary_quantity(mib * MIB)
    assert parse_quantity(text) == mib * MIB
    assert text == {1024: "1Gi", 81920: "80Gi", 15360: "15Gi", 1 << 20: "1Ti"}.get(mib, text)
    assert milli_quantity(1000) == "1"
    assert milli_quantity(250) == "250m"
    assert binary_quantity(0) == "0"


def test_mig_gpus_are_their_instances_and_broken_gpus_are_tainted() -> None:
    gpus = list(preset_devices("a100-mig", "n"))
    gpus[5] = replace(gpus[5], healthy=False)
    gpus[1] = replace(gpus[1], healthy=False)
    devices = {d.name: d for d in slice_devices(tuple(gpus))}
    assert sorted(n for n in devices if n.startswith("gpu-")) == [
        "gpu-4",
        "gpu-5",
        "gpu-6",
        "gpu-7",
    ]
    assert len([n for n in devices if n.startswith("mig-")]) == 28
    assert [t.key for t in devices["gpu-5"].taints] == ["gpu.gpupool.io/unhealthy"]
    assert all(devices[f"mig-1-{i}"].taints for i in range(7))  # a broken parent: all instances
    assert not devices["mig-0-0"].taints
    assert devices["mig-0-0"].allow_multiple_allocations is None  # MIG: one claim each
    assert devices["gpu-4"].allow_multiple_allocations


def test_the_slice_is_owned_by_the_node_and_names_its_pool() -> None:
    body = slice_object("n1", "uid-1", slice_devices(preset_devices("t4", "n1")), 3)
    assert body["metadata"]["name"] == "n1-gpu.gpupool.io"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert body["spec"]["pool"] == {"name": "n1", "generation": 3, "resourceSliceCount": 1}
    assert body["spec"]["nodeName"] == "n1"
    (first, *_) = body["spec"]["devices"]
    assert first["attributes"]["migCapable"] == {"bool": False}
    assert first["capacity"]["memory"] == {
        "value": "15Gi",
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "1Mi"}},
    }
