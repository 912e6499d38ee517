"""A pod's effective request and host ports, as Kubernetes computes them (kube's PodRequests).

The expected figures are worked out by hand from the sidecar KEP's formula: app containers plus
running sidecars; each init container needs its own request plus the sidecars started before it;
the larger of the two; pod-level requests replace cpu/memory/hugepages; then the overhead.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.core.model import HostPort
from gpupool.kube.objects.translate import InvalidObjectError, node_spec, pod_spec

from ..builders import Json, decode_pod, node, pod_dict

RDMA = "example.com/rdma"


def container(name: str, requests: dict[str, str], **more: Any) -> Json:
    return {"name": name, "image": "x", "resources": {"requests": requests}, **more}


def sidecar(name: str, requests: dict[str, str], **more: Any) -> Json:
    return container(name, requests, restartPolicy="Always", **more)


def make_pod(
    containers: list[Json],
    inits: list[Json] | None = None,
    overhead: dict[str, str] | None = None,
    pod_requests: dict[str, str] | None = None,
) -> Json:
    obj = pod_dict("p", cpu="", memory="")
    obj["spec"]["containers"] = containers
    obj["spec"]["initContainers"] = inits or []
    if overhead:
        obj["spec"]["overhead"] = overhead
    if pod_requests:
        obj["spec"]["resources"] = {"requests": pod_requests}
    return obj


@pytest.mark.parametrize(
    ("obj", "cpu_milli"),
    [
        pytest.param(
            make_pod([container("a", {"cpu": "1"}), container("b", {"cpu": "500m"})]),
            1500,
            id="containers-sum",
        ),
        pytest.param(
            make_pod([container("a", {"cpu": "1"})], [sidecar("s", {"cpu": "500m"})]),
            1500,
            id="a-sidecar-runs-beside-the-app",
        ),
        pytest.param(
            make_pod(
                [container("a", {"cpu": "1"})],
                [sidecar("s", {"cpu": "500m"}), container("i", {"cpu": "2"})],
            ),
            2500,
            id="an-init-after-a-sidecar-needs-both",
        ),
        pytest.param(
            make_pod(
                [container("a", {"cpu": "1"})],
                [container("i", {"cpu": "2"}), sidecar("s", {"cpu": "500m"})],
            ),
            2000,
            id="an-init-before-a-sidecar-runs-alone",
        ),
        pytest.param(
            make_pod(
                [container("a", {"cpu": "100m"})],
                [
                    sidecar("s1", {"cpu": "300m"}),
                    container("i", {"cpu": "1"}),
                    sidecar("s2", {"cpu": "300m"}),
                ],
            ),
            1300,
            id="sidecars-on-both-sides-of-an-init",
        ),
        pytest.param(
            make_pod(
                [container("a", {"cpu": "100m"})],
                [sidecar("s1", {"cpu": "2"}), sidecar("s2", {"cpu": "1"})],
            ),
            3100,
            id="sidecars-only-all-add-up",
        ),
        pytest.param(
            make_pod(
                [container("a", {"cpu": "1"})],
                [sidecar("s", {"cpu": "500m"}), container("i", {"cpu": "2"})],
                overhead={"cpu": "250m"},
            ),
            2750,
            id="overhead-after-the-max",
        ),
        pytest.param(
            make_pod([container("a", {"cpu": "1"})], pod_requests={"cpu": "3"}),
            3000,
            id="pod-level-request-replaces-the-containers",
        ),
        pytest.param(
            make_pod(
                [container("a", {"cpu": "1"})], pod_requests={"cpu": "3"}, overhead={"cpu": "1"}
            ),
            4000,
            id="overhead-on-top-of-the-pod-level-request",
        ),
    ],
)
def test_cpu_follows_kubes_pod_requests(obj: Json, cpu_milli: int) -> None:
    assert pod_spec(decode_pod(obj)).cpu_milli == cpu_milli


@pytest.mark.parametrize(
    ("obj", "extras"),
    [
        pytest.param(
            make_pod(
                [{"name": "a", "image": "x", "resources": {"limits": {RDMA: "1"}}}],
            ),
            ((RDMA, 1),),
            id="limits-only-extended-resource",
        ),
        pytest.param(
            make_pod([container("a", {RDMA: "1"})], [sidecar("s", {RDMA: "1"})]),
            ((RDMA, 2),),
            id="sidecar-adds-its-extended-resource",
        ),
        pytest.param(
            make_pod([container("a", {RDMA: "1"})], [container("i", {RDMA: "2"})]),
            ((RDMA, 2),),
            id="init-extended-resource-takes-the-max",
        ),
        pytest.param(
            make_pod([container("a", {RDMA: "1"})], pod_requests={RDMA: "5", "cpu": "1"}),
            ((RDMA, 1),),
            id="pod-level-request-of-an-extended-resource-is-not-supported",
        ),
        pytest.param(
            make_pod(
                [
                    container(
                        "a",
                        {"hugepages-2Mi": "4Mi", "ephemeral-storage": "1Gi", "nvidia.com/gpu": "1"},
                    )
                ]
            ),
            (("ephemeral-storage", 2**30), ("hugepages-2Mi", 4 * 2**20), ("nvidia.com/gpu", 1)),
            id="hugepages-ephemeral-storage-other-vendors",
        ),
        pytest.param(
            make_pod([container("a", {"cpu": "1", RDMA: "0"})]),
            (),
            id="zero-is-not-asked",
        ),
        pytest.param(
            make_pod([container("a", {"storage": "1Gi"})]),
            (),
            id="a-resource-kube-does-not-check",
        ),
    ],
)
def test_extra_resources_follow_kubes_pod_requests(
    obj: Json, extras: tuple[tuple[str, int], ...]
) -> None:
    assert pod_spec(decode_pod(obj)).extra_resources == extras


def test_a_gpu_sidecar_holds_its_gpu_beside_the_app_containers() -> None:
    obj = make_pod(
        [container("a", {"gpupool.io/gpu": "1"})], [sidecar("s", {"gpupool.io/gpu": "1"})]
    )
    assert pod_spec(decode_pod(obj)).gpu_count == 2


def test_an_init_containers_gpu_is_not_held_beside_the_app() -> None:
    obj = make_pod(
        [container("a", {"gpupool.io/gpu": "1"})], [container("i", {"gpupool.io/gpu": "1"})]
    )
    assert pod_spec(decode_pod(obj)).gpu_count == 1


def test_an_extended_resource_beyond_int64_is_refused_naming_its_path() -> None:
    obj = make_pod([container("a", {RDMA: "1e30"})])
    with pytest.raises(InvalidObjectError) as error:
        pod_spec(decode_pod(obj))
    assert error.value.field == f"spec.containers[0].resources.requests[{RDMA}]"


# -- host ports ------------------------------------------------------------------------------------


def port(host_port: int = 0, **more: Any) -> Json:
    return {"containerPort": 80, **({"hostPort": host_port} if host_port else {}), **more}


def test_host_ports_of_app_containers_and_sidecars_but_not_plain_inits() -> None:
    obj = make_pod(
        [
            container("a", {}, ports=[port(8080), port()]),
            container("b", {}, ports=[port(53, protocol="UDP", hostIP="10.0.0.1")]),
        ],
        [
            container("i", {}, ports=[port(9000)]),
            sidecar("s", {}, ports=[port(9001, protocol="SCTP")]),
        ],
    )
    assert pod_spec(decode_pod(obj)).host_ports == tuple(
        sorted((HostPort(8080), HostPort(53, "UDP", "10.0.0.1"), HostPort(9001, "SCTP")))
    )


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        pytest.param(port(70_000), "spec.containers[0].ports[1].hostPort", id="port-range"),
        pytest.param(port(80, protocol="ICMP"), "spec.containers[0].ports[1].protocol", id="proto"),
    ],
)
def test_a_bad_host_port_is_refused_naming_its_path(bad: Json, field: str) -> None:
    obj = make_pod([container("a", {}, ports=[port(8080), bad])])
    with pytest.raises(InvalidObjectError) as error:
        pod_spec(decode_pod(obj))
    assert error.value.field == field


# -- nodes ---------------------------------------------------------------------------------------


def test_node_extra_resources_come_from_allocatable() -> None:
    record = node("n1", gpus=2, mig={RDMA: "2", "hugepages-1Gi": "2Gi"})
    assert node_spec(record).extra_resources == (
        ("ephemeral-storage", 100 * 2**30),
        (RDMA, 2),
        ("hugepages-1Gi", 2 * 2**30),
    )
