"""Extra resources and host ports in the core: filter reasons, bind refusals, preemption, backfill.

kube-scheduler's NodeResourcesFit checks every resource a pod asks for against what its node
offers (a node without a resource in allocatable has none of it), and NodePorts keeps two pods
from binding one host port; the core must agree in its filter, its single-node check, its
snapshot and its what-ifs.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.core.filtering import filter_nodes, fits_on_node
from gpupool.core.model import HostPort, InvalidSpecError, NodeSpec, PodSpec
from gpupool.core.resources import REASON_PORTS, asks_at_least
from gpupool.core.snapshot import AllocationError, ClusterSnapshot
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.backfill import no_smaller
from gpupool.scheduling.preemption import Rule, choose_victims

RDMA = "example.com/rdma"


def rdma_pod(name: str, rdma: int = 1, host_ports: tuple[HostPort, ...] = ()) -> PodSpec:
    return PodSpec(
        name, 1000, 1024, 1, 1000, extra_resources=((RDMA, rdma),), host_ports=host_ports
    )


def two_nodes_one_with_rdma() -> ClusterSnapshot:
    return ClusterSnapshot(
        [
            NodeSpec("n1", 16_000, 65_536, 1, "A100"),
            NodeSpec("n2", 16_000, 65_536, 1, "A100", extra_resources=((RDMA, 1),)),
        ]
    )


# -- the model -----------------------------------------------------------------------------------


def test_extra_resources_are_stored_sorted_without_zero_amounts() -> None:
    pod = PodSpec("p", 0, 0, extra_resources=(("z.io/b", 1), ("hugepages-2Mi", 0), ("a.io/a", 2)))
    assert pod.extra_resources == (("a.io/a", 2), ("z.io/b", 1))
    assert pod == PodSpec("p", 0, 0, extra_resources=(("a.io/a", 2), ("z.io/b", 1)))


@pytest.mark.parametrize(
    ("extras", "field"),
    [
        pytest.param(((RDMA, -1),), f"extra_resources[{RDMA}]", id="negative"),
        pytest.param(((RDMA, 2**63),), f"extra_resources[{RDMA}]", id="overflows-int64"),
        pytest.param(((RDMA, 1), (RDMA, 2)), "extra_resources", id="named-twice"),
    ],
)
def test_bad_extra_resources_are_refused_naming_the_field(
    extras: tuple[tuple[str, int], ...], field: str
) -> None:
    with pytest.raises(InvalidSpecError) as error:
        PodSpec("p", 0, 0, extra_resources=extras)
    assert error.value.field_name == field


def test_host_ports_normalize_empty_ip_and_protocol_like_kube() -> None:
    assert HostPort(80, "", "") == HostPort(80, "TCP", "0.0.0.0")
    with pytest.raises(InvalidSpecError, match=r"1\.\.65535"):
        HostPort(70_000)
    with pytest.raises(InvalidSpecError, match=r"TCP, UDP, SCTP"):
        HostPort(80, "ICMP")


# -- filtering -----------------------------------------------------------------------------------


def test_two_rdma_pods_where_one_node_offers_one_the_second_is_insufficient() -> None:
    snapshot = two_nodes_one_with_rdma()
    first = filter_nodes(snapshot, rdma_pod("a"))
    assert first.mask.tolist() == [False, True]
    assert first.reasons() == ((f"Insufficient {RDMA}", 1),)
    snapshot.bind(rdma_pod("a"), 1, (0,))
    second = filter_nodes(snapshot, rdma_pod("b"))
    assert second.feasible_count == 0
    assert f"2 Insufficient {RDMA}" in second.message()
    assert not fits_on_node(snapshot, rdma_pod("b"), 0)
    assert not fits_on_node(snapshot, rdma_pod("b"), 1)


def test_a_resource_no_node_offers_fails_on_every_node() -> None:
    snapshot = two_nodes_one_with_rdma()
    pod = PodSpec("p", 0, 0, extra_resources=(("vendor.io/nowhere", 1),))
    result = filter_nodes(snapshot, pod)
    assert result.reasons() == (("Insufficient vendor.io/nowhere", 2),)
    assert not any(fits_on_node(snapshot, pod, node) for node in range(2))
    with pytest.raises(AllocationError, match=r"insufficient vendor\.io/nowhere"):
        snapshot.bind(pod, 0)


def test_a_pod_asking_nothing_extra_gets_no_extra_checks() -> None:
    snapshot = two_nodes_one_with_rdma()
    checks = filter_nodes(snapshot, PodSpec("p", 0, 0, 1, 1000)).checks
    assert not [name for name, _ in checks if name.startswith(f"Insufficient {RDMA}")]
    assert REASON_PORTS not in [name for name, _ in checks]


def test_bind_refuses_an_extra_resource_beyond_what_is_left_and_release_gives_it_back() -> None:
    snapshot = two_nodes_one_with_rdma()
    snapshot.bind(rdma_pod("a"), 1, (0,))
    assert snapshot.extra_free.tolist() == [[0], [0]]
    with pytest.raises(AllocationError, match=f"insufficient {RDMA}"):
        snapshot.bind(PodSpec("b", 0, 0, extra_resources=((RDMA, 1),)), 1)
    snapshot.release("a")
    assert snapshot.extra_free.tolist() == [[0], [1]]


def ports_pod(name: str, *ports: HostPort) -> PodSpec:
    return PodSpec(name, 0, 0, host_ports=ports)


@pytest.mark.parametrize(
    ("held", "wanted", "conflict"),
    [
        pytest.param(HostPort(80), HostPort(80), True, id="same-port-all-addresses"),
        pytest.param(HostPort(80), HostPort(80, "UDP"), False, id="other-protocol"),
        pytest.param(HostPort(80), HostPort(81), False, id="other-port"),
        pytest.param(HostPort(80), HostPort(80, host_ip="10.0.0.1"), True, id="held-on-all"),
        pytest.param(HostPort(80, host_ip="10.0.0.1"), HostPort(80), True, id="wanted-on-all"),
        pytest.param(
            HostPort(80, host_ip="10.0.0.1"), HostPort(80, host_ip="10.0.0.1"), True, id="same-ip"
        ),
        pytest.param(
            HostPort(80, host_ip="10.0.0.1"), HostPort(80, host_ip="10.0.0.2"), False, id="other-ip"
        ),
    ],
)
def test_host_port_conflicts_follow_kubes_rule(
    held: HostPort, wanted: HostPort, conflict: bool
) -> None:
    snapshot = ClusterSnapshot([NodeSpec("n1", 1000, 1024), NodeSpec("n2", 1000, 1024)])
    snapshot.bind(ports_pod("holder", held), 0)
    pod = ports_pod("p", wanted)
    result = filter_nodes(snapshot, pod)
    assert result.mask.tolist() == [not conflict, True]
    assert fits_on_node(snapshot, pod, 0) is not conflict
    if conflict:
        assert result.reasons() == ((REASON_PORTS, 1),)
        with pytest.raises(AllocationError, match=r"host port (TCP|UDP)"):
            snapshot.bind(pod, 0)
    else:
        snapshot.bind(pod, 0)


def test_a_released_port_is_free_again_and_a_copy_keeps_its_own_ports() -> None:
    snapshot = ClusterSnapshot([NodeSpec("n1", 1000, 1024)])
    snapshot.bind(ports_pod("a", HostPort(8080)), 0)
    clone = snapshot.copy()
    snapshot.release("a")
    assert fits_on_node(snapshot, ports_pod("b", HostPort(8080)), 0)
    assert not fits_on_node(clone, ports_pod("b", HostPort(8080)), 0)


# -- preemption and backfill ---------------------------------------------------------------------


def running(pod: PodSpec, node: int, started_at: float) -> Running:
    return Running(Workload(pod=pod), queue=0, pool=0, units=1000, node=node, started_at=started_at)


def test_preemption_evicts_the_pod_holding_the_needed_extended_resource() -> None:
    snapshot = two_nodes_one_with_rdma()
    holder, cheap = rdma_pod("holder"), PodSpec("cheap", 1000, 1024, 1, 1000)
    snapshot.bind(holder, 1, (0,))
    snapshot.bind(cheap, 0, (0,))
    candidates = [running(holder, 1, started_at=0.0), running(cheap, 0, started_at=90.0)]
    choice = choose_victims(
        snapshot, rdma_pod("new"), candidates, np.ones(2, bool), now=100.0, rule=Rule.PRIORITY
    )
    assert choice is not None
    assert (choice.node, choice.victims) == (1, ("holder",))


def test_preemption_evicts_the_pod_holding_the_needed_host_port_not_the_cheaper_one() -> None:
    snapshot = ClusterSnapshot([NodeSpec("n1", 16_000, 65_536, 3, "A100")])
    port_holder = PodSpec("port-holder", 1000, 1024, 1, 1000, host_ports=(HostPort(9000),))
    cheap = PodSpec("cheap", 1000, 1024, 1, 1000)
    snapshot.bind(port_holder, 0, (0,))
    snapshot.bind(cheap, 0, (1,))
    candidates = [running(port_holder, 0, started_at=0.0), running(cheap, 0, started_at=99.0)]
    new = PodSpec("new", 1000, 1024, 1, 1000, host_ports=(HostPort(9000),))
    assert not fits_on_node(snapshot, new, 0)  # a GPU is free, the port is not
    choice = choose_victims(snapshot, new, candidates, np.ones(1, bool), 100.0, Rule.PRIORITY)
    assert choice is not None
    assert choice.victims == ("port-holder",)
    assert "port-holder" in snapshot.allocations  # the what-if was put back


def test_backfill_does_not_skip_a_pod_that_asks_for_other_ports_or_less_rdma() -> None:
    failed = rdma_pod("failed", rdma=2, host_ports=(HostPort(80),))
    assert no_smaller(failed, rdma_pod("more", rdma=3, host_ports=(HostPort(80), HostPort(81))))
    assert not no_smaller(failed, rdma_pod("less", rdma=1, host_ports=(HostPort(80),)))
    assert not no_smaller(failed, rdma_pod("other-port", rdma=2, host_ports=(HostPort(81),)))
    assert not asks_at_least(PodSpec("plain", 0, 0), failed)
