"""The live scheduler trusts no record it did not sign, holds terminating pods, contains failures.

Against a real kube-apiserver, etcd and kwok: forged allocation records written by an
administrator never make a GPU be given twice (before and after a scheduler restart); a pod kept
by a finalizer keeps its GPU; a Binding refused by admission leaves the pod pending with the
API's reason and is retried with backoff; a pod that makes the scheduling code raise does not
stop the others.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import defaultdict
from typing import Any

import msgspec

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.signing_key import load_verifier
from gpupool.kube.objects import allocation
from gpupool.kube.objects.signing import RecordVerifier

from .live_helpers import (
    Json,
    SchedulerProcesses,
    create_pods,
    gpu_pod,
    list_pods,
    make_nodes,
    pending_reason,
    wait_for,
    wait_for_events,
)

GPUS_PER_NODE = 4


async def cluster_signer(api: KubeAPI) -> RecordVerifier:
    """The public key the scheduler published (what the node agents read)."""
    return await load_verifier(api, "kube-system")


def annotation(pod: Json) -> str | None:
    """The raw allocation annotation (forged ones need not be JSON)."""
    value = pod["metadata"].get("annotations", {}).get("gpupool.io/allocation")
    return str(value) if value is not None else None


def pinned(pod: Json, node: str) -> Json:
    """``pod`` with a required node affinity for exactly ``node``."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    return pod


def forged_pod(name: str, node: str, record: str | None, selector: dict[str, str]) -> Json:
    """A pod an administrator binds directly (spec.nodeName) with a hand-written record."""
    pod = gpu_pod(name, selector=selector)
    pod["spec"]["nodeName"] = node
    if record is not None:
        pod["metadata"]["annotations"]["gpupool.io/allocation"] = record
    return pod


def forgeries(rng: random.Random, real: list[Json]) -> list[tuple[str, str | None]]:
    """For each real pod, a random record of a kind an admin could write, on its node."""
    out: list[tuple[str, str | None]] = []
    for victim in real:
        record = allocation.decode(victim["metadata"]["annotations"]["gpupool.io/allocation"])
        node = record.node
        kind = rng.choice(["copy", "steal", "garbage", "none", "out-of-range", "unsigned"])
        if kind == "copy":  # a real, signed record copied from another pod
            text: str | None = allocation.encode(record)
        elif kind == "steal":  # another pod's GPU, re-signed with nothing
            text = allocation.encode(msgspec.structs.replace(record, sig=""))
        elif kind == "garbage":
            text = "{not json"
        elif kind == "none":
            text = None
        elif kind == "out-of-range":
            gpu = allocation.GpuShare(index=GPUS_PER_NODE + rng.randrange(4))
            text = allocation.encode(msgspec.structs.replace(record, gpus=(gpu,), sig=""))
        else:  # plausible in every field but the signature
            gpu = msgspec.structs.replace(record.gpus[0], index=rng.randrange(GPUS_PER_NODE))
            text = allocation.encode(msgspec.structs.replace(record, gpus=(gpu,), sig=""))
        out.append((node, text))
    return out


def check_no_gpu_given_twice(pods: list[Json], signer: RecordVerifier) -> dict[str, Any]:
    """Scheduler-made records never overlap, and leave room for every foreign pod's GPUs."""
    trusted: dict[tuple[str, int], str] = {}
    foreign_gpus: dict[str, int] = defaultdict(int)
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        text = pod["metadata"].get("annotations", {}).get("gpupool.io/allocation")
        record = None
        if text:
            try:
                record = allocation.decode(text)
            except allocation.AllocationFormatError:
                record = None
        if record is not None and signer.verify(record, pod["metadata"]["uid"]):
            assert record.node == node
            for share in record.gpus:
                key = (node, share.index)
                assert key not in trusted, f"GPU {key} given to {trusted[key]} and {pod}"
                trusted[key] = pod["metadata"]["name"]
        else:
            foreign_gpus[node] += 1
    used = defaultdict(int)
    for node, _ in trusted:
        used[node] += 1
    for node, count in foreign_gpus.items():
        assert used[node] + count <= GPUS_PER_NODE, (
            f"{node}: {used[node]} GPUs given by the scheduler + {count} held by foreign pods"
        )
    return {"trusted": len(trusted), "foreign": sum(foreign_gpus.values())}


async def test_forged_records_never_make_a_gpu_given_twice(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    rng = random.Random(20261130)
    sel = {"test": namespace}
    nodes = [n.name for n in await make_nodes(api, namespace, 3, gpus=GPUS_PER_NODE)]
    schedulers.start("s1")
    # two real pods per node, then for each a forged pod on the same node (naming its GPUs,
    # copying its record, or worse): every GPU is then taken, by a trusted or a foreign pod
    await create_pods(
        api, namespace, [pinned(gpu_pod(f"real-{i}", selector=sel), nodes[i % 3]) for i in range(6)]
    )

    async def real_bound() -> bool:
        return all(p["spec"].get("nodeName") for p in await list_pods(api, namespace))

    await wait_for(real_bound, 60, "the first pods bound")
    real = await list_pods(api, namespace)
    signer = await cluster_signer(api)
    forged = [
        forged_pod(f"forged-{i}", node, text, sel)
        for i, (node, text) in enumerate(forgeries(rng, real))
    ]
    await create_pods(api, namespace, forged)
    await create_pods(api, namespace, [gpu_pod(f"late-{i}", selector=sel) for i in range(3)])

    async def late_pods() -> list[Json]:
        return [
            p for p in await list_pods(api, namespace) if p["metadata"]["name"].startswith("late")
        ]

    async def all_late_pending() -> bool:
        return all(pending_reason(p) for p in await late_pods())

    await wait_for(all_late_pending, 60, "the late pods pending with a reason")
    await asyncio.sleep(2)
    before = await list_pods(api, namespace)
    counts = check_no_gpu_given_twice(before, signer)
    assert counts == {"trusted": 6, "foreign": 6}
    assert not any(p["spec"].get("nodeName") for p in await late_pods())
    forged_names = {p["metadata"]["name"] for p in forged}
    events = await wait_for_events(
        api,
        namespace,
        "an AllocationNotTrusted Event on each forged pod",
        reason="AllocationNotTrusted",
        until=lambda events: forged_names <= {e["regarding"]["name"] for e in events},
    )
    assert {e["regarding"]["name"] for e in events} == forged_names

    schedulers.kill("s1")  # restart: the new replica rebuilds from the pods
    schedulers.start("s2")
    await api.delete(f"/api/v1/namespaces/{namespace}/pods/real-0")

    async def one_more_bound() -> bool:
        return sum(1 for p in await late_pods() if p["spec"].get("nodeName")) == 1

    await wait_for(one_more_bound, 60, "the freed GPU given to a waiting pod after the restart")
    await asyncio.sleep(2)
    after = await list_pods(api, namespace)
    assert check_no_gpu_given_twice(after, signer) == {"trusted": 6, "foreign": 6}
    records = {p["metadata"]["name"]: annotation(p) for p in after}
    for pod in before:
        name = pod["metadata"]["name"]
        if name in records and pod["spec"].get("nodeName"):
            assert records[name] == annotation(pod), f"{name}'s allocation changed"


async def test_terminating_pod_keeps_its_gpu_until_its_finalizer_is_removed(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=1)
    schedulers.start("s1")
    holder = gpu_pod("holder", selector=sel)
    holder["metadata"]["finalizers"] = ["example.com/hold"]
    await create_pods(api, namespace, [holder])
    path = f"/api/v1/namespaces/{namespace}/pods"

    async def holder_running() -> bool:
        pod = await api.get(f"{path}/holder")
        return pod["status"].get("phase") == "Running"

    await wait_for(holder_running, 60, "the holder running")
    await api.delete(f"{path}/holder")
    await create_pods(api, namespace, [gpu_pod("waiter", selector=sel)])

    async def waiter_reasoned() -> bool:
        return bool(pending_reason(await api.get(f"{path}/waiter")))

    await wait_for(waiter_reasoned, 30, "the waiter pending with a reason")
    await asyncio.sleep(3)  # long enough for a wrongly released GPU to be given away
    waiter = await api.get(f"{path}/waiter")
    assert not waiter["spec"].get("nodeName"), "a terminating pod's GPU was given away"
    assert "Insufficient gpupool.io/gpu" in pending_reason(waiter)
    assert (await api.get(f"{path}/holder"))["metadata"].get("deletionTimestamp")

    await api.patch(f"{path}/holder", {"metadata": {"finalizers": None}})

    async def waiter_bound() -> bool:
        return bool((await api.get(f"{path}/waiter"))["spec"].get("nodeName"))

    await wait_for(waiter_bound, 60, "the waiter bound once the holder is gone")


REFUSE_POLICY = "gpupool-test-refuse-binding"


async def refuse_bindings_of(api: KubeAPI, pod_name: str) -> None:
    """An admission policy that refuses the Binding of one pod (and nothing else)."""
    base = "/apis/admissionregistration.k8s.io/v1"
    await api.create(
        f"{base}/validatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": REFUSE_POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": f"object.metadata.name != '{pod_name}'",
                        "message": "test policy: this pod may not be bound",
                    }
                ],
            },
        },
    )
    await api.create(
        f"{base}/validatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": REFUSE_POLICY},
            "spec": {"policyName": REFUSE_POLICY, "validationActions": ["Deny"]},
        },
    )


async def test_binding_refused_by_admission_shows_the_reason_and_backs_off(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=4)
    await refuse_bindings_of(api, "refused")
    await asyncio.sleep(2)  # policies take effect once the API server has loaded them
    schedulers.start("s1")
    await create_pods(
        api, namespace, [gpu_pod("refused", selector=sel), gpu_pod("accepted", selector=sel)]
    )
    path = f"/api/v1/namespaces/{namespace}/pods"

    async def settled() -> bool:
        refused = await api.get(f"{path}/refused")
        accepted = await api.get(f"{path}/accepted")
        return bool(accepted["spec"].get("nodeName")) and "may not be bound" in pending_reason(
            refused
        )

    await wait_for(settled, 60, "the accepted pod bound and the refused one pending with why")
    first = schedulers.log("s1").count("bind " + namespace + "/refused")
    await asyncio.sleep(12)
    attempts = schedulers.log("s1").count("bind " + namespace + "/refused") - first
    refused = await api.get(f"{path}/refused")
    # backoff 1, 2, 4, 8, 10 s: at most 4 more tries in 12 s (a hot loop would make hundreds)
    exited = schedulers.running["s1"].poll()  # a stalled or dead replica makes no attempt either
    assert 1 <= attempts <= 5, (
        f"{attempts} attempts in 12 s; exit code {exited}; reason: {pending_reason(refused)}"
    )
    assert not refused["spec"].get("nodeName")
    assert "binding refused by the API server" in pending_reason(refused)
    base = "/apis/admissionregistration.k8s.io/v1"
    await api.delete(f"{base}/validatingadmissionpolicybindings/{REFUSE_POLICY}")
    await api.delete(f"{base}/validatingadmissionpolicies/{REFUSE_POLICY}")

    async def refused_bound_at_last() -> bool:
        return bool((await api.get(f"{path}/refused"))["spec"].get("nodeName"))

    await wait_for(refused_bound_at_last, 30, "the pod bound once the policy is gone")


async def test_a_pod_that_makes_scheduling_raise_does_not_stop_the_others(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=4)
    process = schedulers.start("s1", env={"GPUPOOL_FAILPOINT_RAISE_LABEL": "test/raise"})
    boom = gpu_pod("boom", selector=sel)
    boom["metadata"]["labels"] = {"test/raise": "yes"}
    await create_pods(
        api, namespace, [boom, *(gpu_pod(f"fine-{i}", selector=sel) for i in range(3))]
    )

    async def settled() -> bool:
        pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
        fine = all(pods[f"fine-{i}"]["spec"].get("nodeName") for i in range(3))
        return fine and "scheduling error" in pending_reason(pods["boom"])

    await wait_for(settled, 60, "the others bound and boom pending with the error")
    pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
    assert "RuntimeError: failpoint" in pending_reason(pods["boom"])
    assert process.poll() is None, "the scheduler exited"
    assert json.dumps(pods["boom"]["spec"]).count("nodeName") == 0
