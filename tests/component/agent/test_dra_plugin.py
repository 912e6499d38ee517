"""The agent's DRA plugin over its real gRPC sockets, with a kubelet-shaped client.

The client speaks exactly what the kubelet speaks (``pluginregistration.Registration`` on the
registration socket, ``v1.DRAPlugin`` on the endpoint GetInfo names); claims come from a
dictionary shaped like the API server's answers. The real kubelet drives the same plugin in
tests/integration/test_agent_real_kubelet.py.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import msgspec
import pytest

from gpupool.agent.cdi import CLAIM, spec_path
from gpupool.agent.dra.plugin import DraPluginHost
from gpupool.agent.dra.prepare import ClaimPreparer
from gpupool.agent.fakenvml import FakeNvml
from gpupool.agent.grants import ContainerGrant, GpuGrant
from gpupool.agent.handoff import HandoffConfig
from gpupool.agent.isolation import edits_for
from gpupool.agent.protos.dra.v1 import api_pb2 as dra_pb2
from gpupool.agent.protos.dra.v1 import api_pb2_grpc as dra_grpc
from gpupool.agent.protos.pluginregistration.v1 import api_pb2 as reg_pb2
from gpupool.agent.protos.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from gpupool.kube.objects.dra.claim_record import ClaimAllocationRecord, device_status, encode
from gpupool.kube.objects.dra.records import AllocationResult, ResourceClaim
from gpupool.kube.objects.signing import CLAIM_DOMAIN, RecordSigner

from .node import SCHEDULER, PublishedKey, installed_isolation

NODE = "node-a"
CLAIMS_SIGNER = SCHEDULER.for_domain(CLAIM_DOMAIN)
"""The scheduler of these tests, signing claim records."""


class DictClaims:
    """Claims by namespace/name."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads = 0

    def put(self, claim: dict[str, Any]) -> None:
        self.claims[(claim["metadata"]["namespace"], claim["metadata"]["name"])] = claim

    async def get(self, namespace: str, name: str) -> ResourceClaim | None:
        self.reads += 1
        claim = self.claims.get((namespace, name))
        return None if claim is None else msgspec.json.decode(json.dumps(claim), type=ResourceClaim)


def allocated_claim(
    name: str,
    results: list[dict[str, Any]],
    *,
    node: str = NODE,
    record: bool = True,
    record_results: list[dict[str, Any]] | None = None,
    signer: RecordSigner | None = CLAIMS_SIGNER,
) -> dict[str, Any]:
    """A claim allocated as gpupool's scheduler allocates it (status + signed-record annotation).

    ``signer``: who signs the record (None: nobody, its ``sig`` is left empty).
    """
    results = [{"request": "gpu", "driver": "gpu.gpupool.io", "pool": node, **r} for r in results]
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    if record and results:  # the record's entry must name an allocated device
        recorded = [
            {"request": "gpu", "driver": "gpu.gpupool.io", "pool": node, **r}
            for r in (record_results if record_results is not None else results)
        ]
        value = msgspec.convert(
            {"node": node, "results": recorded, "scheduler": "s1"}, ClaimAllocationRecord
        )
        if signer is not None:
            value = signer.sign(value, f"uid-{name}")
        allocation = msgspec.convert(status["allocation"], AllocationResult)
        status["devices"] = device_status(allocation, encode(value))
    return {
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}},
        "status": status,
    }


def share(device: str, memory: str, compute: str, share_id: str = "s-1") -> dict[str, Any]:
    return {
        "device": device,
        "shareID": share_id,
        "consumedCapacity": {"memory": memory, "compute": compute},
    }


@dataclass
class Plugin:
    root: Path
    claims: DictClaims
    nvml: FakeNvml
    host: DraPluginHost
    preparer: ClaimPreparer
    republished: list[int]

    async def info(self) -> reg_pb2.PluginInfo:
        async with grpc.aio.insecure_channel(f"unix://{self.host.registry}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info = await stub.GetInfo(reg_pb2.InfoRequest())
            await stub.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True))
            return info

    async def prepare(self, *names: str) -> dra_pb2.NodePrepareResourcesResponse:
        info = await self.info()
        async with grpc.aio.insecure_channel(f"unix://{info.endpoint}") as channel:
            request = dra_pb2.NodePrepareResourcesRequest(
                claims=[dra_pb2.Claim(namespace="team", uid=f"uid-{n}", name=n) for n in names]
            )
            return await dra_grpc.DRAPluginStub(channel).NodePrepareResources(request)

    async def unprepare(self, *names: str) -> dra_pb2.NodeUnprepareResourcesResponse:
        async with grpc.aio.insecure_channel(f"unix://{self.host.endpoint}") as channel:
            request = dra_pb2.NodeUnprepareResourcesRequest(
                claims=[dra_pb2.Claim(namespace="team", uid=f"uid-{n}", name=n) for n in names]
            )
            return await dra_grpc.DRAPluginStub(channel).NodeUnprepareResources(request)

    def spec(self, name: str) -> dict[str, Any]:
        spec: dict[str, Any] = json.loads(
            spec_path(self.root / "cdi", f"uid-{name}", CLAIM).read_text()
        )
        return spec

    def restart(self) -> None:
        self.preparer = ClaimPreparer(
            self.preparer.config, self.claims, PublishedKey(), self.nvml.devices
        )


@pytest.fixture
async def plugin() -> AsyncIterator[Plugin]:
    root = Path(tempfile.mkdtemp(prefix="gpd", dir="/tmp"))
    nvml = FakeNvml.preset("a100-mig", NODE)  # GPUs 0-3 in MIG mode, 4-7 whole
    config = HandoffConfig(NODE, root / "cdi", root / "state", installed_isolation(root, "mps"))
    claims = DictClaims()
    preparer = ClaimPreparer(config, claims, PublishedKey(), nvml.devices)
    republished: list[int] = []

    async def republish() -> None:
        republished.append(1)

    host = DraPluginHost(root / "plugins_registry", root / "plugins", preparer, republish)
    await host.start()
    try:
        yield Plugin(root, claims, nvml, host, preparer, republished)
    finally:
        await host.stop()
        shutil.rmtree(root, ignore_errors=True)


async def test_registration_names_the_driver_the_service_and_v1(plugin: Plugin) -> None:
    info = await plugin.info()
    assert (info.type, info.name) == ("DRAPlugin", "gpu.gpupool.io")
    assert list(info.supported_versions) == ["v1.DRAPlugin"]
    assert info.endpoint == str(plugin.root / "plugins" / "gpu.gpupool.io" / "dra.sock")
    assert plugin.republished == [1]  # the kubelet wipes slices on start: publish again


async def test_a_share_gets_the_same_edits_and_caps_as_the_device_plugin_path(
    plugin: Plugin,
) -> None:
    plugin.claims.put(allocated_claim("c", [share("gpu-5", "8Gi", "250m")]))
    response = await plugin.prepare("c")
    answer = response.claims["uid-c"]
    assert answer.error == ""
    (device,) = answer.devices
    assert (device.pool_name, device.device_name, device.share_id) == (NODE, "gpu-5", "s-1")
    assert list(device.cdi_device_ids) == ["gpupool.io/claim=uid-c"]
    edits = plugin.spec("c")["devices"][0]["containerEdits"]
    env = dict(e.split("=", 1) for e in edits["env"])
    assert env["CUDA_VISIBLE_DEVICES"] == f"GPU-{NODE}-5"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["GPUPOOL_CLAIM_UID"] == "uid-c"
    # exactly what the device-plugin path writes for the same share, but for the owner's name
    pod_path = edits_for(
        ContainerGrant("p", "team", "p", "main", (GpuGrant(f"GPU-{NODE}-5", 5, 250, 8192, False),)),
        plugin.preparer.config.isolation,
    )
    assert {k: v for k, v in env.items() if k != "GPUPOOL_CLAIM_UID"} == {
        k: v for k, v in pod_path.env.items() if k != "GPUPOOL_POD_UID"
    }
    assert [n["path"] for n in edits["deviceNodes"]] == [n.path for n in pod_path.device_nodes]


async def test_whole_gpus_and_a_mig_instance_have_no_caps(plugin: Plugin) -> None:
    whole = {"memory": "81920Mi", "compute": "1"}
    plugin.claims.put(
        allocated_claim(
            "two",
            [
                {"device": "gpu-4", "shareID": "a", "consumedCapacity": whole},
                {"device": "gpu-6", "shareID": "b", "consumedCapacity": whole},
            ],
        )
    )
    plugin.claims.put(allocated_claim("mig", [{"device": "mig-2-3"}]))
    response = await plugin.prepare("two", "mig")
    devices = response.claims["uid-two"].devices
    assert [d.device_name for d in devices] == ["gpu-4", "gpu-6"]
    assert [list(d.cdi_device_ids) for d in devices] == [["gpupool.io/claim=uid-two"], []]
    env = dict(e.split("=", 1) for e in plugin.spec("two")["devices"][0]["containerEdits"]["env"])
    assert env["CUDA_VISIBLE_DEVICES"] == f"GPU-{NODE}-4,GPU-{NODE}-6"
    assert not {k for k in env if k.startswith("CUDA_MPS")}
    mig = dict(e.split("=", 1) for e in plugin.spec("mig")["devices"][0]["containerEdits"]["env"])
    assert mig["CUDA_VISIBLE_DEVICES"] == f"MIG-{NODE}-2-3"


async def test_prepare_is_idempotent_and_survives_a_restart(plugin: Plugin) -> None:
    plugin.claims.put(allocated_claim("c", [share("gpu-5", "8Gi", "250m")]))
    first = await plugin.prepare("c")
    reads = plugin.claims.reads
    assert await plugin.prepare("c") == first
    assert plugin.claims.reads == reads  # answered from the checkpoint
    spec_path(plugin.root / "cdi", "uid-c", CLAIM).unlink()
    plugin.restart()
    plugin.host._service._preparer = plugin.preparer  # the restarted agent serves the socket
    assert await plugin.prepare("c") == first
    assert plugin.spec("c")  # rewritten from the checkpoint
    assert plugin.claims.reads == reads
    assert (await plugin.unprepare("c")).claims["uid-c"].error == ""
    assert not spec_path(plugin.root / "cdi", "uid-c", CLAIM).exists()
    assert (await plugin.unprepare("c")).claims["uid-c"].error == ""  # again: no error
    assert json.loads((plugin.root / "state" / "dra-claims.json").read_text()) == {}


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        (
            allocated_claim("c", [share("gpu-5", "8Gi", "250m")], record=False),
            "no allocation record status.devices[gpu.gpupool.io].data[gpupool.io/claim-allocation]",
        ),
        (
            allocated_claim("c", [share("gpu-5", "8Gi", "250m")], node="node-b"),
            "claim-allocation].node is 'node-b', this is 'node-a'",
        ),
        (
            allocated_claim("c", [{**share("gpu-5", "8Gi", "250m"), "pool": "node-b"}]),
            "pool is 'node-b', not 'node-a'",
        ),
        (
            allocated_claim(
                "c", [share("gpu-5", "8Gi", "250m")], record_results=[share("gpu-5", "8Gi", "100m")]
            ),
            "differ from status.devices[gpu.gpupool.io].data[gpupool.io/claim-allocation]",
        ),
        (
            allocated_claim("c", [share("gpu-1", "8Gi", "250m")]),
            "'gpu-1' is not a device of this node",
        ),
        (allocated_claim("c", [share("gpu-5", "100Gi", "250m")]), "is not a share of GPU"),
        (  # written by someone the admission policy let through (an administrator)
            allocated_claim("c", [share("gpu-5", "8Gi", "250m")], signer=None),
            "claim-allocation].sig: not signed by this cluster's gpupool scheduler for this claim",
        ),
        (  # a key that is not the scheduler's
            allocated_claim("c", [share("gpu-5", "8Gi", "250m")], signer=RecordSigner.generate()),
            "not signed by this cluster's gpupool scheduler",
        ),
        (  # the scheduler's key, but a pod record's domain: a pod's signature never passes
            allocated_claim("c", [share("gpu-5", "8Gi", "250m")], signer=SCHEDULER),
            "not signed by this cluster's gpupool scheduler",
        ),
        ({**allocated_claim("c", []), "status": {}}, "no result of gpupool's driver"),
    ],
)
async def test_claims_not_allocated_by_gpupool_are_refused(
    plugin: Plugin, claim: dict[str, Any], message: str
) -> None:
    plugin.claims.put(claim)
    answer = (await plugin.prepare("c")).claims["uid-c"]
    assert message in answer.error
    assert "claim team/c" in answer.error
    assert not list(answer.devices)
    assert not spec_path(plugin.root / "cdi", "uid-c", CLAIM).exists()


async def test_a_recreated_claim_and_a_missing_one_are_refused(plugin: Plugin) -> None:
    claim = allocated_claim("c", [share("gpu-5", "8Gi", "250m")])
    claim["metadata"]["uid"] = "uid-new"
    plugin.claims.put(claim)
    answers = await plugin.prepare("c", "absent")
    assert "deleted and re-created" in answers.claims["uid-c"].error
    assert "claim team/absent not found" in answers.claims["uid-absent"].error


async def test_no_gpu_is_oversubscribed_across_claims(plugin: Plugin) -> None:
    plugin.claims.put(allocated_claim("a", [share("gpu-5", "60Gi", "500m", "s-a")]))
    plugin.claims.put(allocated_claim("b", [share("gpu-5", "30Gi", "250m", "s-b")]))
    plugin.claims.put(
        allocated_claim(
            "w",
            [
                {
                    "device": "gpu-5",
                    "shareID": "s-w",
                    "consumedCapacity": {"memory": "81920Mi", "compute": "1"},
                }
            ],
        )
    )
    answers = await plugin.prepare("a", "b", "w")
    assert answers.claims["uid-a"].error == ""
    assert (
        "would be oversubscribed (compute 750/1000 milli, memory 92160/81920 MiB)"
        in answers.claims["uid-b"].error
    )
    assert "is exclusive but already given" in answers.claims["uid-w"].error
    await plugin.unprepare("a")
    assert (await plugin.prepare("w")).claims["uid-w"].error == ""  # free again


async def test_an_unhealthy_gpu_is_refused(plugin: Plugin) -> None:
    plugin.nvml.replace_devices(
        replace(g, healthy=False) if g.index == 5 else g for g in plugin.nvml.devices()
    )
    plugin.claims.put(allocated_claim("c", [share("gpu-5", "8Gi", "250m")]))
    assert "is unhealthy" in (await plugin.prepare("c")).claims["uid-c"].error
