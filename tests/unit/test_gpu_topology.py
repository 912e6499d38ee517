"""A pod of several GPUs gets them from one NVLink domain when one has room, else one NUMA node.

From NVML's NVLink pairs to domains on the agent, through the node annotation the agent
publishes and the scheduler reads, to the GPUs the placement picks: on a node of two islands of
four (``h100-islands``) with GPUs 0-2 taken, the first free pair by index would be 3 and 4, one
in each island; the pair comes from the second island instead. On an NVSwitch node (one
domain) of two sockets the same holds for the host NUMA nodes the agent reads from NVML.
"""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest

from gpupool.agent.fakenvml import preset_devices
from gpupool.agent.inventory import publication
from gpupool.agent.nvml import link_domains
from gpupool.core.model import InvalidSpecError, NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects.records import NodeRecord
from gpupool.kube.objects.translate import node_spec
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_GPU_LINKS,
    ANNOTATION_GPU_NUMA,
    ANNOTATION_GPU_UUIDS,
)
from gpupool.scheduling.gpu_choice import best_fit_gpus

from .kube.builders import node as node_record

ISLANDS = (0, 0, 0, 0, 1, 1, 1, 1)


def _snapshot(
    links: tuple[int, ...] = ISLANDS, busy: tuple[int, ...] = (0, 1, 2), numa: tuple[int, ...] = ()
) -> ClusterSnapshot:
    spec = NodeSpec(
        "n", 64_000, 256_000, gpu_count=8, gpu_model="H100", gpu_links=links, gpu_numa=numa
    )
    snapshot = ClusterSnapshot([spec])
    for index in busy:
        snapshot.bind(PodSpec(f"busy-{index}", 100, 100, 1, 1000), 0, (index,))
    return snapshot


def _pod(gpus: int) -> PodSpec:
    return PodSpec("p", 1000, 1024, gpu_count=gpus, gpu_milli=1000)


def test_a_pair_comes_from_one_island_not_the_first_two_free_gpus() -> None:
    assert best_fit_gpus(_snapshot(), _pod(2), 0) == (4, 5)
    assert best_fit_gpus(_snapshot(links=()), _pod(2), 0) == (3, 4)  # unknown: by index


def test_the_island_with_least_room_left_is_filled_first() -> None:
    assert best_fit_gpus(_snapshot(busy=(0, 1)), _pod(2), 0) == (2, 3)  # keeps 4-7 whole


def test_a_pod_no_island_can_hold_spans_them() -> None:
    assert best_fit_gpus(_snapshot(busy=()), _pod(6), 0) == (0, 1, 2, 3, 4, 5)


def test_nvlink_pairs_make_domains_and_a_node_without_nvlink_has_one_per_gpu() -> None:
    pairs = {(a, b) for a in range(8) for b in range(a + 1, 8) if a // 4 == b // 4}
    assert link_domains(8, pairs) == ISLANDS
    everything = {(a, b) for a in range(8) for b in range(a + 1, 8)}
    assert link_domains(8, everything) == (0,) * 8  # an NVSwitch
    assert link_domains(3, set()) == (0, 1, 2)  # PCIe only


def test_the_agent_publishes_islands_and_the_scheduler_reads_them() -> None:
    islands = publication(preset_devices("h100-islands", "n0"), 4)
    assert islands.annotations[ANNOTATION_GPU_LINKS] == "0,0,0,0,1,1,1,1"
    switch = publication(preset_devices("h100", "n0"), 4)
    assert switch.annotations[ANNOTATION_GPU_LINKS] is None  # one domain: nothing to say
    uuids = ",".join(f"GPU-n0-{i}" for i in range(8))
    written = {ANNOTATION_GPU_LINKS: "0,0,0,0,1,1,1,1", ANNOTATION_GPU_UUIDS: uuids}
    assert node_spec(_annotated(written)).gpu_links == ISLANDS


@pytest.mark.parametrize("written", ["0,0,1", "a,b,c,d,e,f,g,h"])
def test_an_annotation_that_does_not_fit_the_node_is_ignored(written: str) -> None:
    assert node_spec(_annotated({ANNOTATION_GPU_LINKS: written})).gpu_links == ()


def test_a_node_spec_needs_one_domain_per_gpu() -> None:
    with pytest.raises(InvalidSpecError, match="gpu_links"):
        NodeSpec("n", 1000, 1000, gpu_count=2, gpu_model="H100", gpu_links=(0,))


def test_on_one_nvlink_domain_a_pair_comes_from_one_numa_node() -> None:
    sockets = (0, 0, 0, 0, 1, 1, 1, 1)
    assert best_fit_gpus(_snapshot(links=(), numa=sockets), _pod(2), 0) == (4, 5)
    assert best_fit_gpus(_snapshot(links=(), numa=sockets, busy=(0, 1)), _pod(2), 0) == (2, 3)


def test_the_agent_publishes_numa_nodes_from_nvml_and_the_scheduler_reads_them() -> None:
    switch = publication(preset_devices("h100", "n0"), 4)
    assert switch.annotations[ANNOTATION_GPU_NUMA] == "0,0,0,0,1,1,1,1"
    unknown = publication(tuple(replace(d, numa_node=-1) for d in preset_devices("h100", "n0")), 4)
    assert unknown.annotations[ANNOTATION_GPU_NUMA] is None  # NVML could not say
    assert node_spec(_annotated({ANNOTATION_GPU_NUMA: "0,0,0,0,1,1,1,1"})).gpu_numa == ISLANDS


def _annotated(annotations: dict[str, str]) -> NodeRecord:
    """An 8-GPU node record with ``annotations`` added."""
    record = node_record("n0", gpus=8)
    meta = msgspec.structs.replace(
        record.metadata, annotations={**record.metadata.annotations, **annotations}
    )
    return msgspec.structs.replace(record, metadata=meta)
