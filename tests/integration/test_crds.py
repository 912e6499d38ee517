"""The gpupool.io CRDs as a real kube-apiserver serves and enforces them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import ApiError, JsonObject, KubeAPI
from gpupool.kube.install.crds import CRD_PATH, crd_manifests, install_crds

GROUP_VERSION = "gpupool.io/v1alpha1"
PLURALS = {"GPUPool": "gpupools", "GPUQueue": "gpuqueues"}
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def collection(kind: str) -> str:
    return f"/apis/{GROUP_VERSION}/{PLURALS[kind]}"


def manifest(kind: str, name: str, spec: JsonObject) -> JsonObject:
    return {"apiVersion": GROUP_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


async def create(api: KubeAPI, kind: str, name: str, spec: JsonObject) -> JsonObject:
    return await api.create(collection(kind), manifest(kind, name, spec))


def condition(obj: JsonObject, kind: str) -> str | None:
    return next((c["status"] for c in obj["status"]["conditions"] if c["type"] == kind), None)


@pytest.fixture(autouse=True)
async def crds(api: KubeAPI) -> None:
    await install_crds(api)


async def test_crds_are_established_served_and_reinstall_is_a_no_op(api: KubeAPI) -> None:
    names = [m["metadata"]["name"] for m in crd_manifests()]
    assert names == ["gpupools.gpupool.io", "gpuqueues.gpupool.io"]
    before = [await api.get(f"{CRD_PATH}/{name}") for name in names]
    assert all(condition(crd, "Established") == "True" for crd in before)
    assert all(condition(crd, "NamesAccepted") == "True" for crd in before)

    discovery = await api.get(f"/apis/{GROUP_VERSION}")
    served = {r["name"]: r for r in discovery["resources"]}
    assert set(served) == {"gpupools", "gpupools/status", "gpuqueues", "gpuqueues/status"}
    assert served["gpupools"]["shortNames"] == ["gpool"]
    assert served["gpuqueues"]["shortNames"] == ["gq"]
    assert not served["gpupools"]["namespaced"]
    assert not served["gpuqueues"]["namespaced"]

    await install_crds(api)
    after = [await api.get(f"{CRD_PATH}/{name}") for name in names]
    assert [c["metadata"]["generation"] for c in after] == [
        c["metadata"]["generation"] for c in before
    ]


async def test_install_replaces_an_outdated_definition(api: KubeAPI) -> None:
    path = f"{CRD_PATH}/gpupools.gpupool.io"
    outdated = await api.get(path)
    del outdated["spec"]["versions"][0]["additionalPrinterColumns"]
    await api.replace(path, outdated)
    assert "additionalPrinterColumns" not in (await api.get(path))["spec"]["versions"][0]

    await install_crds(api)

    columns = (await api.get(path))["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == ["Mode", "GPUs", "Allocated", "Age"]


async def test_valid_objects_are_stored_with_defaults(api: KubeAPI) -> None:
    await create(
        api,
        "GPUPool",
        "valid-shared",
        {
            "mode": "Shared",
            "nodeSelector": {"gpupool.io/gpu-model": "A100"},
            "shared": {"memoryOvercommit": 1.5},
            "allowedClasses": ["inference", "dev"],
            "allowedQueues": ["team-a"],
            "governance": {
                "idleThreshold": {"gpuUtilPercent": 5},
                "idleGrace": "30m",
                "maxShareDuration": "1h30m",
            },
        },
    )
    await create(api, "GPUPool", "valid-exclusive", {"mode": "Exclusive"})
    await create(
        api,
        "GPUQueue",
        "valid-queue",
        {
            "namespaces": ["team-a"],
            "quotas": [{"pool": "valid-shared", "guaranteed": 2, "ceiling": 2}, {"pool": "x"}],
        },
    )

    shared = (await api.get(f"{collection('GPUPool')}/valid-shared"))["spec"]
    assert shared["shared"] == {"maxPodsPerGPU": 4, "memoryOvercommit": 1.5, "computeOvercommit": 1}
    assert shared["governance"]["maxShareDuration"] == "1h30m"
    exclusive = (await api.get(f"{collection('GPUPool')}/valid-exclusive"))["spec"]
    assert exclusive == {"mode": "Exclusive"}
    queue = (await api.get(f"{collection('GPUQueue')}/valid-queue"))["spec"]
    assert queue == {
        "namespaces": ["team-a"],
        "priority": 0,
        "weight": 1,
        "reclaimable": True,
        "quotas": [
            {"pool": "valid-shared", "guaranteed": 2, "ceiling": 2},
            {"pool": "x", "guaranteed": 0},
        ],
    }


POOL_STATUS = {
    "observedGeneration": 1,
    "nodes": 2,
    "gpus": 8,
    "allocatedGPUUnits": 2.5,
    "pods": 3,
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "NodesFound",
            "message": "2 nodes match the selector",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
}


async def test_status_is_written_only_through_its_subresource(api: KubeAPI) -> None:
    path = f"{collection('GPUPool')}/status-pool"
    await create(api, "GPUPool", "status-pool", {"mode": "Shared"})

    await api.patch(f"{path}/status", {"status": POOL_STATUS})
    stored = await api.get(path)
    assert stored["status"] == POOL_STATUS
    assert stored["metadata"]["generation"] == 1

    await api.patch(path, {"spec": {"mode": "MIG", "shared": None}, "status": {"gpus": 99}})
    stored = await api.get(path)
    assert stored["spec"] == {"mode": "MIG"}
    assert stored["status"]["gpus"] == 8
    assert stored["metadata"]["generation"] == 2

    with pytest.raises(ApiError) as caught:
        await api.patch(f"{path}/status", {"status": {"gpus": -1}})
    assert caught.value.status == 422
    assert "status.gpus: Invalid value: -1" in caught.value.message


@pytest.mark.parametrize(
    ("kind", "spec", "status", "columns", "cells"),
    [
        pytest.param(
            "GPUPool",
            {"mode": "Shared"},
            {"gpus": 8, "allocatedGPUUnits": 2.5},
            ["Name", "Mode", "GPUs", "Allocated", "Age"],
            ["Shared", 8, 2.5],
            id="pool",
        ),
        pytest.param(
            "GPUQueue",
            {"namespaces": ["team-a"], "priority": 100, "weight": 2.5},
            {"pendingPods": 4, "runningPods": 7},
            ["Name", "Priority", "Weight", "Pending", "Running", "Age"],
            [100, 2.5, 4, 7],
            id="queue",
        ),
    ],
)
async def test_printer_columns_are_served(
    api: KubeAPI,
    kind: str,
    spec: JsonObject,
    status: JsonObject,
    columns: list[str],
    cells: list[Any],
) -> None:
    name = f"columns-{kind.lower()}"
    path = f"{collection(kind)}/{name}"
    await create(api, kind, name, spec)
    await api.patch(f"{path}/status", {"status": status})

    response = await api.http.get(path, headers={"Accept": TABLE})
    table = response.json()

    assert response.status_code == 200
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == columns
    [row] = table["rows"]
    assert row["cells"][:-1] == [name, *cells]
    assert row["cells"][-1].endswith("s")  # Age, as kubectl prints it ("3s")


def pool(**spec: Any) -> tuple[str, JsonObject]:
    return "GPUPool", spec


def queue(**spec: Any) -> tuple[str, JsonObject]:
    return "GPUQueue", {"namespaces": ["team-a"], **spec}


def shared_pool(**shared: Any) -> tuple[str, JsonObject]:
    return pool(mode="Shared", shared=shared)


def governed_pool(**governance: Any) -> tuple[str, JsonObject]:
    return pool(mode="Exclusive", governance=governance)


BAD_OBJECTS = [
    pytest.param(pool(mode="Fractional"), 'spec.mode: Unsupported value: "Fractional"', id="mode"),
    pytest.param(pool(), "spec.mode: Required value", id="no-mode"),
    pytest.param(
        shared_pool(maxPodsPerGPU=0),
        "spec.shared.maxPodsPerGPU: Invalid value: 0",
        id="max-pods-per-gpu-zero",
    ),
    pytest.param(
        shared_pool(memoryOvercommit=4.5),
        "spec.shared.memoryOvercommit: Invalid value: 4.5",
        id="memory-overcommit-above-cap",
    ),
    pytest.param(
        shared_pool(computeOvercommit=0.5),
        "spec.shared.computeOvercommit: Invalid value: 0.5",
        id="compute-overcommit-below-one",
    ),
    pytest.param(
        pool(mode="Exclusive", shared={}),
        "spec.shared: Forbidden: spec.shared is only allowed when spec.mode is Shared",
        id="shared-on-exclusive",
    ),
    pytest.param(
        pool(mode="MIG", allowedClasses=["not ok"]),
        'spec.allowedClasses[0]: Invalid value: "not ok"',
        id="class-name",
    ),
    pytest.param(
        governed_pool(idleThreshold={"gpuUtilPercent": 5}, idleGrace="30 minutes"),
        'spec.governance.idleGrace: Invalid value: "30 minutes"',
        id="duration",
    ),
    pytest.param(
        governed_pool(idleThreshold={"gpuUtilPercent": 101}, idleGrace="30m"),
        "spec.governance.idleThreshold.gpuUtilPercent: Invalid value: 101",
        id="idle-percent-above-100",
    ),
    pytest.param(
        governed_pool(idleGrace="30m"),
        "spec.governance.idleThreshold: Required value",
        id="idle-grace-without-threshold",
    ),
    pytest.param(
        governed_pool(idleThreshold={"gpuUtilPercent": 5}),
        "spec.governance.idleGrace: Required value",
        id="idle-threshold-without-grace",
    ),
    pytest.param(
        governed_pool(maxShareDuration="1d"),
        'spec.governance.maxShareDuration: Invalid value: "1d"',
        id="max-share-duration-in-days",
    ),
    pytest.param(
        pool(mode="Exclusive", disruptionBudgetWait="5 minutes"),
        'spec.disruptionBudgetWait: Invalid value: "5 minutes"',
        id="budget-wait-duration",
    ),
    pytest.param(
        pool(mode="Exclusive", maxEvictionGracePeriodSeconds=0),
        "spec.maxEvictionGracePeriodSeconds: Invalid value: 0",
        id="eviction-grace-below-one",
    ),
    pytest.param(
        queue(quotas=[{"pool": "a", "guaranteed": -1}]),
        "spec.quotas[0].guaranteed: Invalid value: -1",
        id="negative-guaranteed",
    ),
    pytest.param(
        queue(quotas=[{"pool": "a", "guaranteed": 1.5, "ceiling": 1}]),
        "spec.quotas[0].ceiling: Invalid value: ceiling must be >= guaranteed",
        id="ceiling-below-guaranteed",
    ),
    pytest.param(
        queue(quotas=[{"pool": "a", "guaranteed": 1}, {"pool": "a"}]),
        "spec.quotas[1]: Duplicate value",
        id="quota-pool-twice",
    ),
    pytest.param(
        queue(quotas=[{"guaranteed": 1}]), "spec.quotas[0].pool: Required value", id="quota-pool"
    ),
    pytest.param(
        ("GPUQueue", {"namespaces": []}),
        "spec.namespaces: Invalid value: 0: spec.namespaces in body should have at least 1 items",
        id="no-namespaces",
    ),
    pytest.param(("GPUQueue", {}), "spec.namespaces: Required value", id="namespaces-missing"),
    pytest.param(
        ("GPUQueue", {"namespaces": ["Team_A"]}),
        'spec.namespaces[0]: Invalid value: "Team_A"',
        id="namespace-name",
    ),
    pytest.param(queue(weight=0), "spec.weight: Invalid value: 0", id="weight-zero"),
    pytest.param(queue(weight=1001), "spec.weight: Invalid value: 1001", id="weight-above-max"),
    pytest.param(
        queue(priority=1000001), "spec.priority: Invalid value: 1000001", id="priority-above-max"
    ),
    pytest.param(
        queue(maxConcurrentPods=-1),
        "spec.maxConcurrentPods: Invalid value: -1",
        id="negative-max-concurrent-pods",
    ),
    pytest.param(
        queue(minRuntimeBeforePreemption="10"),
        'spec.minRuntimeBeforePreemption: Invalid value: "10"',
        id="runtime-without-unit",
    ),
]


@pytest.mark.parametrize(("kind_spec", "expected"), BAD_OBJECTS)
async def test_bad_objects_are_rejected_naming_the_field(
    api: KubeAPI, request: pytest.FixtureRequest, kind_spec: tuple[str, JsonObject], expected: str
) -> None:
    kind, spec = kind_spec
    name = f"bad-{request.node.callspec.id}"

    with pytest.raises(ApiError) as caught:
        await create(api, kind, name, spec)

    assert caught.value.status == 422, caught.value
    assert expected in caught.value.message
    with pytest.raises(ApiError) as missing:
        await api.get(f"{collection(kind)}/{name}")
    assert missing.value.status == 404


async def test_unknown_fields_are_refused_under_strict_field_validation(api: KubeAPI) -> None:
    body = manifest("GPUQueue", "strict", {"namespaces": ["team-a"], "bogus": 1})

    with pytest.raises(ApiError) as caught:
        await api.create(f"{collection('GPUQueue')}?fieldValidation=Strict", body)

    # Strict decoding fails before validation: 400 BadRequest, not 422 Invalid.
    assert caught.value.status == 400
    assert 'unknown field "spec.bogus"' in caught.value.message

    stored = await api.create(collection("GPUQueue"), body)
    assert "bogus" not in stored["spec"]  # without Strict, unknown fields are pruned


async def test_install_crds_command(control_plane: LocalControlPlane, api: KubeAPI) -> None:
    result = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "gpupool",
            "install-crds",
            "--kubeconfig",
            str(control_plane.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "installed gpupools.gpupool.io" in result.stdout
    stored = await api.get(f"{CRD_PATH}/gpuqueues.gpupool.io")
    assert stored["spec"]["group"] == "gpupool.io"
