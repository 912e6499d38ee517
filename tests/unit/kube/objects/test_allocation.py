from __future__ import annotations

import json

import pytest

from gpupool.core.model import PodSpec
from gpupool.kube.objects.allocation import (
    AllocationFormatError,
    AllocationRecord,
    GpuShare,
    decode,
    encode,
    from_decision,
)

from ..builders import bind_decision

WHOLE = PodSpec(name="u1", cpu_milli=1000, memory_mib=1024, gpu_count=2, gpu_milli=1000)
SHARE = PodSpec(
    name="u2", cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=300, gpu_memory_mib=8192
)
MEMORY_ONLY = PodSpec(name="u3", cpu_milli=0, memory_mib=0, gpu_count=1, gpu_memory_mib=4096)
MIG = PodSpec(name="u4", cpu_milli=100, memory_mib=64, mig_profile="1g.18gb")
CPU = PodSpec(name="u5", cpu_milli=100, memory_mib=64)
UUIDS = ("GPU-n1-0", "GPU-n1-1", "GPU-n1-2", "GPU-n1-3")


@pytest.mark.parametrize(
    ("spec", "gpus", "kind", "shares", "mig_profile"),
    [
        pytest.param(
            WHOLE,
            (1, 3),
            "whole",
            (GpuShare(1, "GPU-n1-1", 1000, 0), GpuShare(3, "GPU-n1-3", 1000, 0)),
            "",
            id="whole",
        ),
        pytest.param(SHARE, (2,), "share", (GpuShare(2, "GPU-n1-2", 300, 8192),), "", id="share"),
        pytest.param(
            MEMORY_ONLY, (0,), "share", (GpuShare(0, "GPU-n1-0", 0, 4096),), "", id="memory-only"
        ),
        pytest.param(MIG, (), "mig", (), "1g.18gb", id="mig"),
        pytest.param(CPU, (), "none", (), "", id="cpu-only"),
    ],
)
def test_from_decision(
    spec: PodSpec,
    gpus: tuple[int, ...],
    kind: str,
    shares: tuple[GpuShare, ...],
    mig_profile: str,
) -> None:
    record = from_decision(
        bind_decision(spec, 0, "n1", gpus), UUIDS, scheduler="s-0", time="2025-01-01T00:00:00Z"
    )
    assert record == AllocationRecord(
        node="n1",
        kind=kind,
        gpus=shares,
        mig_profile=mig_profile,
        scheduler="s-0",
        time="2025-01-01T00:00:00Z",
    )


def test_from_decision_without_uuids_leaves_them_empty() -> None:
    record = from_decision(bind_decision(WHOLE, 0, "n1", (0, 5)), ("GPU-a",), "s", "t")
    assert [share.uuid for share in record.gpus] == ["GPU-a", ""]


@pytest.mark.parametrize("spec", [WHOLE, SHARE, MEMORY_ONLY, MIG, CPU])
def test_encode_decode_round_trip(spec: PodSpec) -> None:
    gpus = tuple(range(spec.gpu_count))
    record = from_decision(bind_decision(spec, 0, "n1", gpus), UUIDS, "s-0", "t")
    text = encode(record)
    assert isinstance(text, str)
    assert decode(text) == record


def test_encode_uses_camel_case_keys() -> None:
    record = from_decision(bind_decision(SHARE, 0, "n1", (2,)), UUIDS, "s-0", "t")
    wire = json.loads(encode(record))
    assert wire["gpus"] == [{"index": 2, "uuid": "GPU-n1-2", "milli": 300, "memoryMib": 8192}]
    assert "migProfile" in wire
    assert "mig_profile" not in wire


def test_decode_fills_defaults_and_ignores_unknown_fields() -> None:
    record = decode('{"node": "n1", "kind": "whole", "gpus": [{"index": 0}], "future": 1}')
    assert record == AllocationRecord(node="n1", kind="whole", gpus=(GpuShare(index=0),))
    assert record.gpus[0].milli == 1000


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("not json", id="not-json"),
        pytest.param("", id="empty"),
        pytest.param('{"node": "n1"', id="truncated"),
        pytest.param('{"kind": "whole"}', id="missing-node"),
        pytest.param('{"node": "n1"}', id="missing-kind"),
        pytest.param("[]", id="array"),
        pytest.param("null", id="null"),
        pytest.param('{"node": 3, "kind": "whole"}', id="node-not-a-string"),
        pytest.param('{"node": "n1", "kind": "whole", "gpus": [{"uuid": "x"}]}', id="no-index"),
        pytest.param('{"node": "n1", "kind": "whole", "gpus": [{"index": "0"}]}', id="str-index"),
    ],
)
def test_decode_errors(text: str) -> None:
    with pytest.raises(AllocationFormatError, match=r"^gpupool\.io/allocation: "):
        decode(text)


def test_decode_error_says_not_json() -> None:
    with pytest.raises(AllocationFormatError, match="not JSON"):
        decode("{")


def test_decode_error_names_the_missing_field() -> None:
    with pytest.raises(AllocationFormatError, match="node"):
        decode('{"kind": "whole"}')
