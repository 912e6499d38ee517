"""gpupool's node agent under a real kubelet, scheduled by gpupool, on a real API server.

The kubelet is ``k8s.io/kubernetes/cmd/kubelet`` at the control plane's version, with a fake CRI
runtime (``k8s.io/cri-client``'s, plus CDI resolution at CreateContainer as containerd does it);
``scripts/build-kubelet.sh`` builds both and ``make test-kubelet`` runs this module. It needs
root (the kubelet mounts its root folder) and the fixed ``/var/lib/kubelet/device-plugins``, so
it runs only with ``-m real_kubelet``; the same behaviour is covered without a kubelet binary by
``tests/component/agent`` (a test kubelet modelled on this one).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.devcluster.processes import free_port
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.install.crds import install_crds
from gpupool.kube.install.rbac import grant_scheduler_role

from .dra_helpers import claims_by_name, create_claim_pod
from .live_helpers import SchedulerProcesses, gpu_pod, list_pods, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.real_kubelet]

PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")  # fixed in the kubelet, not configurable
KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
failCgroupV1: false
port: {port}
readOnlyPort: 0
healthzPort: 0
authentication: {{anonymous: {{enabled: true}}, webhook: {{enabled: false}}}}
authorization: {{mode: AlwaysAllow}}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://{root}/cri.sock
imageServiceEndpoint: unix://{root}/cri.sock
resolvConf: ""
localStorageCapacityIsolation: false
"""
IMAGE = "registry.invalid/cuda-app:1"


@dataclass
class RealNode:
    """A kubelet, its fake runtime and gpupool's agent, as processes."""

    name: str
    root: Path
    bin_dir: Path
    kubeconfig: Path
    log_dir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def _spawn(self, name: str, command: list[str]) -> None:
        with (self.log_dir / f"{name}.log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start_runtime(self) -> None:
        self._spawn(
            "cri",
            [
                str(self.bin_dir / "fakecri"),
                f"unix://{self.root}/cri.sock",
                str(self.root / "cdi"),
                str(self.root / "containers.jsonl"),
                IMAGE,
            ],
        )

    def start_kubelet(self) -> None:
        config = self.root / "kubelet.yaml"
        config.write_text(KUBELET_CONFIG.format(port=free_port(), root=self.root))
        self._spawn(
            "kubelet",
            [
                str(self.bin_dir / "kubelet"),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                f"--root-dir={self.root}/kubelet",
                f"--cert-dir={self.root}/pki",
                f"--hostname-override={self.name}",
                "--v=2",
            ],
        )

    def start_agent(self, preset: str = "h100") -> None:
        for folder in ("pipe", "shm"):  # what the MPS daemon makes when it starts (it needs a GPU)
            (self.root / "mps" / folder).mkdir(parents=True, exist_ok=True)
        self._spawn(
            "agent",
            [
                sys.executable,
                "-m",
                "gpupool",
                "agent",
                f"--node-name={self.name}",
                f"--kubeconfig={self.kubeconfig}",
                f"--fake-gpus={preset}",
                f"--plugin-dir={PLUGIN_DIR}",
                f"--pod-resources-socket={self.root}/kubelet/pod-resources/kubelet.sock",
                f"--plugins-registry-dir={self.root}/kubelet/plugins_registry",
                f"--plugins-dir={self.root}/kubelet/plugins",
                f"--cdi-dir={self.root}/cdi",
                f"--state-dir={self.root}/agent",
                f"--mps-root={self.root}/mps",
                "--metrics-port=0",
                "--reconcile-period=1",
                "--collect-after=10",
                "--usage-period=1",
            ],
        )

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        process = self.processes.pop(name)
        process.send_signal(sig)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def created_containers(self) -> list[dict[str, Any]]:
        """What the runtime created, with the environment after CDI resolution."""
        path = self.root / "containers.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def specs(self, kind: str = "container") -> set[str]:
        return {p.name for p in (self.root / "cdi").glob(f"gpupool.io-{kind}-*.json")}


@pytest.fixture
def real_node(
    control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> Iterator[RealNode]:
    bin_dir = Path(os.environ.get("GPUPOOL_KUBELET_BIN", ""))
    for binary in ("kubelet", "fakecri"):
        assert (bin_dir / binary).is_file(), (
            "set GPUPOOL_KUBELET_BIN to the folder scripts/build-kubelet.sh prints"
        )
    assert os.geteuid() == 0, "a real kubelet needs root (it mounts its root folder)"
    assert not (PLUGIN_DIR / "kubelet.sock").exists(), f"another kubelet owns {PLUGIN_DIR}"
    root = Path(tempfile.mkdtemp(prefix="gpk", dir="/tmp"))  # unix socket paths stay short
    node = RealNode(f"kubelet-{namespace}", root, bin_dir, control_plane.kubeconfig, tmp_path)
    try:
        yield node
    finally:
        for name in list(node.processes):
            node.stop(name)
        subprocess.run(["umount", "-R", str(root / "kubelet")], check=False, capture_output=True)
        for leftover in ("kubelet.sock", "kubelet_internal_checkpoint"):
            (PLUGIN_DIR / leftover).unlink(missing_ok=True)
        for socket in PLUGIN_DIR.glob("gpupool-*.sock"):
            socket.unlink()
        shutil.rmtree(root, ignore_errors=True)


async def _node(api: KubeAPI, name: str) -> dict[str, Any]:
    return await api.get(f"/api/v1/nodes/{name}")


async def _allocatable(api: KubeAPI, name: str) -> str:
    try:
        node = await _node(api, name)
    except Exception:  # not registered yet
        return ""
    ready = any(
        c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", [])
    )
    return node["status"].get("allocatable", {}).get("gpupool.io/gpu", "") if ready else ""


def _waiting_message(pod: dict[str, Any]) -> str:
    for status in pod["status"].get("containerStatuses", []):
        waiting = status.get("state", {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message', '')}"
    return ""


async def _running(api: KubeAPI, namespace: str, names: set[str]) -> bool:
    pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
    return all(pods.get(n, {}).get("status", {}).get("phase") == "Running" for n in names)


async def test_shares_under_a_real_kubelet(
    api: KubeAPI,
    namespace: str,
    real_node: RealNode,
    schedulers: SchedulerProcesses,
) -> None:
    node = real_node
    await install_crds(api)
    await api.create(
        "/apis/gpupool.io/v1alpha1/gpupools",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GPUPool",
            "metadata": {"name": f"pool-{namespace}"},
            "spec": {
                "mode": "Shared",
                "nodeSelector": {"kubernetes.io/hostname": node.name},
                "shared": {"maxPodsPerGPU": 4},
            },
        },
    )
    node.start_runtime()
    node.start_kubelet()
    node.start_agent()

    async def registered() -> bool:
        return await _allocatable(api, node.name) == "32"

    # 8 fake H100s x maxPodsPerGPU 4, published by the real kubelet from the device plugin
    await wait_for(registered, 90, "the kubelet to publish 32 gpupool.io/gpu devices")
    published = await _node(api, node.name)
    assert published["metadata"]["labels"]["gpupool.io/gpu-model"] == "H100"
    assert len(published["metadata"]["annotations"]["gpupool.io/gpu-uuids"].split(",")) == 8

    # 20 shares of different sizes, created at once in shuffled order, placed by gpupool
    schedulers.start("s1")
    rng = random.Random(20)
    shapes = [
        (rng.choice([10, 15, 20, 25]), rng.choice([2048, 4096, 8192, 16384])) for _ in range(20)
    ]
    pods = [
        gpu_pod(f"share-{i}", cores=cores, memory_mib=memory)
        for i, (cores, memory) in enumerate(shapes)
    ]
    for pod in pods:
        pod["spec"]["containers"][0]["resources"].pop("requests")
        pod["spec"]["containers"][0]["image"] = IMAGE
        pod["spec"]["terminationGracePeriodSeconds"] = 0
    rng.shuffle(pods)
    await api.create_all(f"/api/v1/namespaces/{namespace}/pods", pods, concurrency=20)
    names = {p["metadata"]["name"] for p in pods}

    async def all_running() -> bool:
        return await _running(api, namespace, names)

    await wait_for(all_running, 180, "20 shares Running on the real kubelet")
    live = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
    created = {c["uid"]: c for c in node.created_containers()}
    for name, (cores, memory) in ((f"share-{i}", s) for i, s in enumerate(shapes)):
        pod = live[name]
        record = json.loads(pod["metadata"]["annotations"]["gpupool.io/allocation"])
        assert record["node"] == node.name
        container = created[pod["metadata"]["uid"]]
        env = container["env"]
        assert env["GPUPOOL_POD_UID"] == pod["metadata"]["uid"], name
        assert env["CUDA_VISIBLE_DEVICES"] == record["gpus"][0]["uuid"], name
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == str(cores), name
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory}M", name
        assert f"/dev/nvidia{record['gpus'][0]['index']}" in container["deviceNodes"], name

    # the idle signal on the Node lists every granted pod (fake NVML: no process, 0 % SM)
    uids = {live[name]["metadata"]["uid"] for name in names}

    async def usage_published() -> bool:
        annotations = (await _node(api, node.name))["metadata"].get("annotations", {})
        usage = json.loads(annotations.get("gpupool.io/gpu-usage", '{"pods": {}}'))
        return set(usage["pods"]) == uids

    await wait_for(usage_published, 60, "the usage signal of the 20 pods on the Node")

    # forged and missing records, on pods bound without the scheduler (no bypass policy in this
    # module): refused, never started
    forged = gpu_pod("forged", cores=10, memory_mib=1024)
    forged["spec"]["containers"][0]["resources"].pop("requests")
    forged["spec"]["nodeName"] = node.name
    forged["metadata"]["annotations"]["gpupool.io/allocation"] = json.dumps(
        {
            "node": node.name,
            "kind": "share",
            "gpus": [{"index": 1, "uuid": f"GPU-{node.name}-3", "milli": 100, "memoryMib": 1024}],
        }
    )
    missing = json.loads(json.dumps(forged))
    missing["metadata"]["name"] = "missing"
    del missing["metadata"]["annotations"]["gpupool.io/allocation"]
    for pod in (forged, missing):
        await api.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    expected = {  # the forger has no private key: the signature is the first thing that fails
        "forged": "gpupool.io/allocation.sig: not signed by this cluster's gpupool scheduler",
        "missing": "has no gpupool.io/allocation record",
    }

    async def refused() -> bool:
        pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
        return all(
            text in _waiting_message(pods.get(n, {"status": {}})) for n, text in expected.items()
        )

    await wait_for(refused, 120, "the forged and missing pods to be refused")
    assert not {"forged", "missing"} & {c["pod"] for c in node.created_containers()}

    # kubelet restart: the agent re-registers, running pods keep their GPUs, nothing collected
    specs = node.specs()
    assert len(specs) == 20
    node.stop("kubelet", signal.SIGKILL)
    node.start_kubelet()
    await wait_for(registered, 120, "re-registration after a kubelet restart")
    await asyncio.sleep(6)  # several reconcile periods, fewer than --collect-after
    assert node.specs() == specs
    assert await _running(api, namespace, names)

    # agent restart: the same. SIGTERM stops the agent at once, exit 0, its plugin socket gone
    # (the kubelet sees the stream end before the next agent registers)
    agent = node.processes["agent"]
    node.stop("agent")
    assert agent.returncode == 0
    assert not list(PLUGIN_DIR.glob("gpupool-*.sock"))
    node.start_agent()
    await asyncio.sleep(5)
    # a new Python process on a crowded machine can take longer than 5 s to register
    await wait_for(registered, 60, "re-registration after an agent restart")
    assert node.specs() == specs

    # a newcomer after both restarts gets a GPU and caps of its own
    newcomer = gpu_pod("newcomer", cores=5, memory_mib=512)
    newcomer["spec"]["containers"][0]["resources"].pop("requests")
    newcomer["spec"]["containers"][0]["image"] = IMAGE
    await api.create(f"/api/v1/namespaces/{namespace}/pods", newcomer)

    async def newcomer_running() -> bool:
        return await _running(api, namespace, {"newcomer"})

    await wait_for(newcomer_running, 120, "the newcomer Running")
    pod = await api.get(f"/api/v1/namespaces/{namespace}/pods/newcomer")
    record = json.loads(pod["metadata"]["annotations"]["gpupool.io/allocation"])
    env = {c["uid"]: c for c in node.created_containers()}[pod["metadata"]["uid"]]["env"]
    assert env["CUDA_VISIBLE_DEVICES"] == record["gpus"][0]["uuid"]
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=512M"

    # every pod deleted: the kubelet frees the devices and the agent collects every hand-off
    for pod in await list_pods(api, namespace):
        await api.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")

    async def collected() -> bool:
        return not await list_pods(api, namespace) and not node.specs()

    await wait_for(collected, 120, "every pod gone and every CDI spec collected")
    assert json.loads((node.root / "agent" / "handoff.json").read_text()) == {}


RESOURCE = "/apis/resource.k8s.io/v1"
SHARE = {
    "deviceClassName": "gpu-share.gpupool.io",
    "capacity": {"requests": {"memory": "8Gi", "compute": "250m"}},
}


def _visible(node: str, device: str) -> str:
    """The UUID a container sees for a device of the a100-mig preset (``gpu-5``, ``mig-2-3``)."""
    kind, *numbers = device.split("-")
    return f"{'GPU' if kind == 'gpu' else 'MIG'}-{node}-{'-'.join(numbers)}"


async def test_claims_placed_by_gpupool_are_prepared_under_a_real_kubelet(
    api: KubeAPI,
    control_plane: LocalControlPlane,
    namespace: str,
    real_node: RealNode,
    schedulers: SchedulerProcesses,
) -> None:
    """Claims for a share, a MIG slice and two whole GPUs: allocated by ``gpupool control-plane
    --claims`` (as exactly the shipped role), prepared by the agent for the real kubelet, each
    container given exactly its devices and caps; deletion unprepares and frees the capacity a
    waiting claim for four GPUs needs. No admission policy is installed here, as on a cluster
    installed without them: what stops a forged allocation is the agent's own check."""
    node = real_node
    user = f"gpupool-scheduler-{namespace}"
    await install_crds(api)  # gpupool's DeviceClasses with the CRDs
    await grant_scheduler_role(api, user)
    node.start_runtime()
    node.start_kubelet()
    node.start_agent("a100-mig")  # GPUs 0-3 in MIG mode (7 x 1g.10gb each), 4-7 whole

    async def published() -> bool:
        try:
            stored = await api.get(f"{RESOURCE}/resourceslices/{node.name}-gpu.gpupool.io")
        except Exception:  # not yet, or wiped by the kubelet's start
            return False
        return len(stored["spec"]["devices"]) == 4 * 7 + 4

    await wait_for(published, 90, "the agent's ResourceSlice after registering with the kubelet")
    await api.patch(f"/api/v1/nodes/{node.name}", {"metadata": {"labels": {"test": node.name}}})
    schedulers.kubeconfig = control_plane.user_kubeconfig(user)
    schedulers.extra_args = ("--claims",)
    schedulers.start("claims")
    requests = {
        "share": SHARE,
        "mig": {"deviceClassName": "mig-1g.10gb.gpupool.io"},
        "two": {"deviceClassName": "gpu.gpupool.io", "count": 2},
    }
    for name, request in requests.items():
        await create_claim_pod(
            api, namespace, name, request, node_label=node.name, image=IMAGE, grace_seconds=0
        )

    async def running() -> bool:
        return await _running(api, namespace, set(requests))

    await wait_for(running, 180, "the three claim pods placed by gpupool and Running")
    # all four whole GPUs: one is the share's, two are held; it waits for them
    await create_claim_pod(
        api,
        namespace,
        "four",
        {"deviceClassName": "gpu.gpupool.io", "count": 4},
        node_label=node.name,
        image=IMAGE,
        grace_seconds=0,
    )
    claims = await claims_by_name(api, namespace)
    created = {c["pod"]: c for c in node.created_containers()}
    devices = {}
    for name in requests:
        claim = claims[name]
        devices[name] = [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]
        assert claim["status"]["reservedFor"][0]["name"] == name
        container = created[name]
        assert container["cdiDevices"] == [f"gpupool.io/claim={claim['metadata']['uid']}"]
        assert container["env"]["GPUPOOL_CLAIM_UID"] == claim["metadata"]["uid"]
        visible = [_visible(node.name, d) for d in devices[name]]
        assert container["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(visible), name
    assert devices["share"][0].startswith("gpu-")
    assert devices["mig"][0].startswith("mig-")
    assert len(set(devices["two"]) | {devices["share"][0]}) == 3  # no GPU given twice
    share_env = created["share"]["env"]
    assert share_env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
    assert share_env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert f"/dev/nvidia{devices['share'][0].split('-')[1]}" in created["share"]["deviceNodes"]
    for name in ("mig", "two"):
        assert not {k for k in created[name]["env"] if k.startswith("CUDA_MPS")}, name
    assert {f"/dev/nvidia{d.split('-')[1]}" for d in devices["two"]} <= set(
        created["two"]["deviceNodes"]
    )
    assert node.specs("claim") == {
        f"gpupool.io-claim-{claims[n]['metadata']['uid']}.json" for n in requests
    }
    four = await api.get(f"/api/v1/namespaces/{namespace}/pods/four")
    assert not four["spec"].get("nodeName")

    # the share claim's allocation and signed record copied onto another claim, bound by hand:
    # the signature is for the share claim's uid, so the agent refuses it
    claims_path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    forged = await create_claim_pod(
        api, namespace, "forged", SHARE, node_label=node.name, image=IMAGE, scheduler="none"
    )
    copied = {k: claims["share"]["status"][k] for k in ("allocation", "devices")}
    reserved = [{"resource": "pods", "name": "forged", "uid": forged["metadata"]["uid"]}]
    await api.patch(f"{claims_path}/forged/status", {"status": {**copied, "reservedFor": reserved}})
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "forged"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node.name},
    }
    await api.create(f"/api/v1/namespaces/{namespace}/pods/forged/binding", binding)

    async def refused() -> bool:
        events = await api.get(f"/api/v1/namespaces/{namespace}/events")
        return any(
            "not signed by this cluster's gpupool scheduler for this claim" in e.get("message", "")
            for e in events["items"]
        )

    await wait_for(refused, 120, "the kubelet to report the agent's refusal of the copied record")
    assert "forged" not in {c["pod"] for c in node.created_containers()}
    await api.delete(f"/api/v1/namespaces/{namespace}/pods/forged")

    # deletion: the kubelet unprepares, the agent removes the specs, gpupool frees the devices
    for name in requests:
        await api.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")

    async def four_running() -> bool:
        return await _running(api, namespace, {"four"})

    await wait_for(four_running, 180, "the claim for four GPUs placed once the others went")
    four_claim = (await claims_by_name(api, namespace))["four"]
    results = four_claim["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == [f"gpu-{i}" for i in range(4, 8)]
    assert node.specs("claim") == {f"gpupool.io-claim-{four_claim['metadata']['uid']}.json"}
    await api.delete(f"/api/v1/namespaces/{namespace}/pods/four")

    async def unprepared() -> bool:
        return not await list_pods(api, namespace) and not node.specs("claim")

    await wait_for(unprepared, 120, "every claim pod gone and every claim unprepared")
    assert json.loads((node.root / "agent" / "dra-claims.json").read_text()) == {}
