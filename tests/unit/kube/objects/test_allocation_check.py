"""The allocation checker the live tests and the live bench share: one case per rule."""

from __future__ import annotations

import json
from typing import Any

import pytest
from benchlib.allocation_check import (
    PROBLEMS,
    AllocationProblemError,
    NodeGpus,
    check_allocations,
    inventory,
    raise_for_problems,
)

from gpupool.devcluster.fakenodes import FakeGpuNode

H100 = 81559
NODES = inventory(
    [
        FakeGpuNode("n1", gpus=2).manifest(),
        FakeGpuNode("n2", gpus=2, gpu_model="A100", gpu_memory_mib=40960).manifest(),
    ]
)


def gpu(index: int, node: str = "n1", milli: int = 1000, memory: int = 0) -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-{node}-{index}", "milli": milli, "memoryMib": memory}


def pod(
    name: str,
    node: str | None,
    record: dict[str, Any] | str | None,
    *,
    asks: str = "1",
    phase: str = "Running",
    scheduler: str = "gpupool",
) -> dict[str, Any]:
    annotations = {}
    if record is not None:
        text = record if isinstance(record, str) else json.dumps(record)
        annotations["gpupool.io/allocation"] = text
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {"gpupool.io/gpu": asks}}}],
        },
        "status": {"phase": phase},
    }


def whole(node: str, *gpus: dict[str, Any]) -> dict[str, Any]:
    return {"node": node, "kind": "whole", "gpus": list(gpus)}


def share(node: str, *gpus: dict[str, Any]) -> dict[str, Any]:
    return {"node": node, "kind": "share", "gpus": list(gpus)}


CASES: list[tuple[str, list[dict[str, Any]], dict[str, int]]] = [
    (
        "distinct whole GPUs",
        [pod("a", "n1", whole("n1", gpu(0))), pod("b", "n1", whole("n1", gpu(1)))],
        {},
    ),
    (
        "shares adding up to one GPU",
        [
            pod("a", "n1", share("n1", gpu(0, milli=600, memory=40000))),
            pod("b", "n1", share("n1", gpu(0, milli=400, memory=41559))),
        ],
        {},
    ),
    (
        "same whole GPU twice",
        [pod("a", "n1", whole("n1", gpu(0))), pod("b", "n1", whole("n1", gpu(0)))],
        {"compute_over_1000_milli": 1, "memory_over_gpu": 1, "whole_gpu_shared": 1},
    ),
    (
        "whole GPU also shared",
        [
            pod("a", "n1", whole("n1", gpu(0))),
            pod("b", "n1", share("n1", gpu(0, milli=0, memory=0))),
        ],
        {"whole_gpu_shared": 1},
    ),
    (
        "compute over 1000 milli",
        [
            pod("a", "n1", share("n1", gpu(1, milli=600))),
            pod("b", "n1", share("n1", gpu(1, milli=500))),
        ],
        {"compute_over_1000_milli": 1},
    ),
    (
        "memory over the node's GPU (A100, 40960 MiB)",
        [
            pod("a", "n2", share("n2", gpu(0, "n2", milli=100, memory=30000))),
            pod("b", "n2", share("n2", gpu(0, "n2", milli=100, memory=20000))),
        ],
        {"memory_over_gpu": 1},
    ),
    ("bound without a record", [pod("a", "n1", None)], {"missing_record": 1}),
    ("record not JSON", [pod("a", "n1", "{not json")], {"unreadable_record": 1}),
    (
        "record without a node",
        [pod("a", "n1", {"kind": "whole", "gpus": []})],
        {"unreadable_record": 1},
    ),
    (
        "record names another node",
        [pod("a", "n2", whole("n1", gpu(0, "n2")))],
        {"node_mismatch": 1},
    ),
    (
        "bound to a node not in the inventory",
        [pod("a", "n9", whole("n9", gpu(0, "n9")))],
        {"unknown_node": 1},
    ),
    (
        "two GPUs for a one-GPU pod",
        [pod("a", "n1", whole("n1", gpu(0), gpu(1)))],
        {"wrong_gpu_count": 1},
    ),
    (
        "unreadable GPU request",
        [pod("a", "n1", whole("n1", gpu(0)), asks="lots")],
        {"wrong_gpu_count": 1},
    ),
    ("GPU index the node lacks", [pod("a", "n1", whole("n1", gpu(7)))], {"unknown_gpu": 1}),
    (
        "UUID of another node",
        [pod("a", "n1", whole("n1", gpu(0, "n2") | {"index": 0}))],
        {"uuid_mismatch": 1},
    ),
    (
        "finished pods hold nothing",
        [
            pod("a", "n1", whole("n1", gpu(0)), phase="Succeeded"),
            pod("b", "n1", whole("n1", gpu(0))),
        ],
        {},
    ),
    ("pending pods are not checked", [pod("a", None, None)], {}),
    (
        "other schedulers' pods are not checked",
        [pod("a", "n1", None, scheduler="default-scheduler")],
        {},
    ),
]


@pytest.mark.parametrize(("pods", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_rule_counts_exactly_its_problems(
    pods: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    check = check_allocations(pods, NODES)
    assert {kind: len(found) for kind, found in check.problems.items() if found} == expected
    assert check.ok is not expected
    summary = check.summary()
    assert summary["ok"] is check.ok
    assert all(summary[kind] == expected.get(kind, 0) for kind in PROBLEMS)
    if expected:
        with pytest.raises(AllocationProblemError) as raised:
            raise_for_problems(check)
        for kind in expected:
            assert kind in str(raised.value)
    else:
        raise_for_problems(check)


def test_counts_gpus_used_and_names_the_pods_in_messages() -> None:
    pods = [
        pod("a", "n1", whole("n1", gpu(0))),
        pod("b", "n1", whole("n1", gpu(0))),
        pod("c", "n2", share("n2", gpu(1, "n2", milli=300, memory=1000))),
        pod("d", None, None),
    ]
    check = check_allocations(pods, NODES)
    assert (check.pods_checked, check.pods_bound, check.records_checked, check.gpus_used) == (
        4,
        3,
        3,
        2,
    )
    both = "['ns/a', 'ns/b']"
    assert check.problems["whole_gpu_shared"] == [f"n1/0: whole to {both}, held by {both}"]
    assert check.summary(examples=1)["compute_over_1000_milli_examples"] == [
        f"n1/0: 2000 milli to {both}"
    ]


MALFORMED_NODE = {
    "metadata": {"name": "x", "labels": {"gpupool.io/gpu-memory-mib": "lots"}},
    "status": {"allocatable": {"gpupool.io/gpu": "1.5"}},
}


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (
            FakeGpuNode("x", gpus=3, gpu_memory_mib=100).manifest(),
            NodeGpus(3, 100, ("GPU-x-0", "GPU-x-1", "GPU-x-2")),
        ),
        (FakeGpuNode("x", gpus=0).manifest(), NodeGpus(0, 0, ())),
        (MALFORMED_NODE, NodeGpus(0, 0, ())),
    ],
    ids=["fake node", "cpu node", "malformed fields"],
)
def test_node_inventory_reads_the_node_object(node: dict[str, Any], expected: NodeGpus) -> None:
    assert NodeGpus.from_node(node) == expected
