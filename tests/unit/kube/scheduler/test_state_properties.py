"""Random informer event streams: the incremental snapshot equals one rebuilt from the records.

Pods are GPU shares small enough (at most 8 x 12 % of a GPU) that every placement fits, so no
event stream can produce a legitimate conflict; any conflict or negative free amount is a bug in
how :class:`ClusterState` applies events.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpupool.core.decisions import Bind
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.scheduler.state import ClusterState

from ..builders import (
    SIGNER,
    Json,
    allocation_annotation,
    annotated,
    bind_decision,
    decode_node,
    decode_pod,
    node_dict,
    pod_dict,
)

NODES = ("n0", "n1")
GPUS = 4
PODS = 8
ARRAYS = ("cpu_free", "memory_free", "pods_free", "gpu_free_total", "mig_free")

Step = tuple[str, int, int, int, int]


def share_pod(index: int, cores: int, **fields: Any) -> Json:
    return pod_dict(
        f"p{index}", gpus=1, cores=cores, gpu_memory=1000, cpu="1", memory="1Gi", **fields
    )


class World:
    """The API server's objects, and the events an informer delivers to a ClusterState."""

    def __init__(self) -> None:
        self.state = ClusterState("gpupool", signer=SIGNER)
        self.state.restart()
        self.nodes: dict[str, Json] = {}
        self.pods: dict[str, Json] = {}
        self.used: set[int] = set()
        self.decisions: dict[str, Bind] = {}
        self.assumed: set[str] = set()  # what the scheduler should still be holding for itself
        self.version = 1
        for name in NODES:
            self.put_node(node_dict(name, gpus=GPUS, gpu_memory_mib=80000))
        self.state.sync()

    def bump(self, obj: Json) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def put_node(self, obj: Json) -> None:
        kind = "MODIFIED" if obj["metadata"]["name"] in self.nodes else "ADDED"
        self.bump(obj)
        self.nodes[obj["metadata"]["name"]] = obj
        self.state.on_node(kind, decode_node(obj))

    def put_pod(self, obj: Json) -> None:
        uid = obj["metadata"]["uid"]
        kind = "MODIFIED" if uid in self.pods else "ADDED"
        self.bump(obj)
        self.pods[uid] = obj
        self.state.on_pod(kind, decode_pod(obj))

    def pick(self, candidates: set[str] | list[str], index: int) -> str | None:
        """The ``index``-th candidate (modulo), so that most steps find a pod to act on."""
        ordered = sorted(candidates)
        return ordered[index % len(ordered)] if ordered else None

    def apply(self, step: Step) -> None:
        op, index, node_index, gpu, cores = step
        name = NODES[node_index]
        state = self.state
        live = [
            uid
            for uid, obj in self.pods.items()
            if obj["status"]["phase"] not in ("Succeeded", "Failed")
        ]
        unbound = [uid for uid in live if "nodeName" not in self.pods[uid]["spec"]]
        if op in ("add", "add_foreign") and len(self.used) < PODS:
            number = len(self.used)
            self.used.add(number)
            if op == "add":
                self.put_pod(share_pod(number, cores))
            else:
                foreign = {"scheduler": "default-scheduler", "node": name, "phase": "Running"}
                self.put_pod(share_pod(number, cores, **foreign))
        elif op == "assume" and (uid := self.pick(state.pending, index)) is not None:
            snapshot = state.snapshot
            if snapshot is not None and name in snapshot.node_index:
                spec = state.spec_of(decode_pod(self.pods[uid]))
                decision = bind_decision(spec, snapshot.node_index[name], name, (gpu,))
                state.assume(decision)
                self.decisions[uid] = decision
                self.assumed.add(uid)
        elif op == "bind" and (uid := self.pick(unbound, index)) is not None:
            obj = self.pods[uid]
            if uid in self.assumed:
                event("bind confirms an assumption")
                self.assumed.discard(uid)
                made = self.decisions[uid]
                obj["spec"]["nodeName"] = made.node_name
                obj["metadata"]["annotations"].update(allocation_annotation(made))
            else:  # bound by a scheduler replica that has since gone, or forged
                obj["spec"]["nodeName"] = name
                cores = int(
                    obj["spec"]["containers"][0]["resources"]["limits"]["gpupool.io/gpu-cores"]
                )
                record = annotated(
                    name,
                    (gpu,),
                    "share",
                    uid=uid,
                    milli=cores * 10,
                    memory_mib=1000,
                    signer=SIGNER if index % 2 else None,
                )
                event("bound with a trusted record" if index % 2 else "bound with a forged record")
                obj["metadata"]["annotations"].update(record)
            self.put_pod(obj)
        elif op == "forget" and (uid := self.pick(self.assumed, index)) is not None:
            self.assumed.discard(uid)
            state.forget(uid)
        elif op in ("finish", "delete", "touch", "terminate") and (uid := self.pick(live, index)):
            obj = self.pods[uid]
            if op in ("finish", "delete"):
                self.assumed.discard(uid)
            if op == "finish":
                obj["status"]["phase"] = "Succeeded" if gpu % 2 else "Failed"
                self.put_pod(obj)
            elif op == "delete":
                del self.pods[uid]
                state.on_pod("DELETED", decode_pod(obj))
            elif op == "terminate":  # a finalizer keeps it; it still runs
                obj["metadata"]["deletionTimestamp"] = "2025-01-01T01:00:00Z"
                self.put_pod(obj)
            else:
                obj["metadata"]["labels"]["touched"] = str(self.version)
                self.put_pod(obj)
        elif op == "heartbeat" and name in self.nodes:
            for condition in self.nodes[name]["status"]["conditions"]:
                condition["lastHeartbeatTime"] = f"2025-01-01T00:{self.version % 60:02d}:00Z"
            self.put_node(self.nodes[name])
        elif op == "relabel" and name in self.nodes:
            self.nodes[name]["metadata"]["labels"]["pool"] = str(self.version)
            self.put_node(self.nodes[name])
        elif op == "node_delete" and name in self.nodes:
            state.on_node("DELETED", decode_node(self.nodes.pop(name)))
            self.assumed -= {u for u in self.assumed if self.decisions[u].node_name == name}
        elif op == "node_add" and name not in self.nodes:
            self.put_node(node_dict(name, gpus=GPUS, gpu_memory_mib=80000))
        state.sync()

    def from_scratch(self) -> ClusterState:
        fresh = ClusterState("gpupool", signer=SIGNER)
        fresh.restart()
        for obj in self.nodes.values():
            fresh.on_node("ADDED", decode_node(obj))
        for obj in self.pods.values():
            fresh.on_pod("ADDED", decode_pod(obj))
        fresh.sync()
        return fresh


def rebuilt(world: World) -> ClusterState:
    """A state built from scratch from the world's records, with the same pods assumed."""
    fresh = world.from_scratch()
    for uid in sorted(world.assumed):
        decision = world.decisions[uid]
        assert fresh.snapshot is not None
        row = fresh.snapshot.node_index[decision.node_name]
        fresh.assume(bind_decision(decision.pod, row, decision.node_name, decision.gpus))
    return fresh


def check_bounds(snapshot: ClusterSnapshot | None) -> None:
    if snapshot is None:
        return
    assert bool(np.all(snapshot.gpu_free >= 0))
    assert bool(np.all(snapshot.gpu_free <= 1000))
    assert bool(np.all(snapshot.gpu_memory_free >= 0))
    assert bool(np.all(snapshot.gpu_memory_free <= snapshot.gpu_memory_capacity))
    assert bool(np.all(snapshot.cpu_free >= 0))
    assert bool(np.all(snapshot.pods_free >= 0))


def check_same(world: World, fresh: ClusterState) -> None:
    state = world.state
    assert state.pending == fresh.pending
    assert state.assumed == world.assumed
    assert fresh.assumed == world.assumed
    assert (state.snapshot is None) is (fresh.snapshot is None)
    if state.snapshot is None or fresh.snapshot is None:
        return
    ours, theirs = state.snapshot, fresh.snapshot
    assert ours.node_names == theirs.node_names
    assert set(ours.allocations) == set(theirs.allocations)
    for uid, held in ours.allocations.items():
        assert held.node == theirs.allocations[uid].node, uid
        if uid not in state.foreign:  # trusted records and our own decisions: exactly
            assert held.gpus == theirs.allocations[uid].gpus, uid
    assert state.foreign == fresh.foreign
    for array in ARRAYS:
        assert np.array_equal(getattr(ours, array), getattr(theirs, array)), array
    # Foreign shares go best-fit, which depends on arrival order: compare per-node totals.
    assert np.array_equal(ours.gpu_free.sum(axis=1), theirs.gpu_free.sum(axis=1))
    assert np.array_equal(ours.gpu_memory_free.sum(axis=1), theirs.gpu_memory_free.sum(axis=1))
    assert ours.used_gpu_milli == theirs.used_gpu_milli


INDEX = st.integers(0, 7)
NODE = st.integers(0, len(NODES) - 1)
GPU = st.integers(0, GPUS - 1)
CORES = st.sampled_from([5, 10, 12])


class ClusterStateEvents(RuleBasedStateMachine):
    """Informer events in random order; after each, the state matches a rebuild."""

    def __init__(self) -> None:
        super().__init__()
        self.world = World()

    def do(self, op: str, index: int = 0, node: int = 0, gpu: int = 0, cores: int = 10) -> None:
        self.world.apply((op, index, node, gpu, cores))

    @precondition(lambda self: len(self.world.used) < PODS)
    @rule(cores=CORES)
    def add(self, cores: int) -> None:
        self.do("add", cores=cores)

    @precondition(lambda self: len(self.world.used) < PODS)
    @rule(node=NODE, cores=CORES)
    def add_foreign(self, node: int, cores: int) -> None:
        self.do("add_foreign", node=node, cores=cores)

    @precondition(lambda self: bool(self.world.state.pending))
    @rule(index=INDEX, node=NODE, gpu=GPU)
    def assume(self, index: int, node: int, gpu: int) -> None:
        self.do("assume", index, node, gpu)

    @precondition(lambda self: bool(self.world.assumed or self.world.state.pending))
    @rule(index=INDEX, node=NODE, gpu=GPU)
    def bind(self, index: int, node: int, gpu: int) -> None:
        self.do("bind", index, node, gpu)

    @precondition(lambda self: bool(self.world.assumed))
    @rule(index=INDEX)
    def forget(self, index: int) -> None:
        self.do("forget", index)

    @precondition(lambda self: bool(self.world.pods))
    @rule(op=st.sampled_from(["finish", "delete", "touch", "terminate"]), index=INDEX, gpu=GPU)
    def change_pod(self, op: str, index: int, gpu: int) -> None:
        self.do(op, index, gpu=gpu)

    @rule(op=st.sampled_from(["heartbeat", "relabel", "node_delete", "node_add"]), node=NODE)
    def change_node(self, op: str, node: int) -> None:
        self.do(op, node=node)

    @invariant()
    def consistent(self) -> None:
        state = self.world.state
        check_bounds(state.snapshot)
        assert state.stats.conflicts == 0
        assert not state.assumed & state.pending
        check_same(self.world, rebuilt(self.world))

    def teardown(self) -> None:
        state = self.world.state
        for uid in sorted(self.world.assumed):
            state.forget(uid)
        self.world.assumed.clear()
        state.sync()
        check_same(self.world, self.world.from_scratch())


ClusterStateEvents.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
TestClusterStateEvents = ClusterStateEvents.TestCase
