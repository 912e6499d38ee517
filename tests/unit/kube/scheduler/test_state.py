from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.core.filtering import (
    REASON_NOT_READY,
    REASON_SELECTOR,
    REASON_TAINTS,
    REASON_UNSCHEDULABLE,
    fits_on_node,
)
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects import allocation
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.intake import pod_order
from gpupool.kube.scheduler.state import ClusterState

from ..builders import (
    SIGNER,
    Json,
    allocation_annotation,
    annotated,
    bind_decision,
    decode_node,
    decode_pod,
    make_state,
    masks,
    node,
    node_dict,
    pod,
    pod_dict,
)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
SCHEDULER = "gpupool"


def snap(state: ClusterState) -> ClusterSnapshot:
    assert state.snapshot is not None
    return state.snapshot


def gpu_free(state: ClusterState, node_name: str) -> list[int]:
    snapshot = snap(state)
    row = snapshot.node_index[node_name]
    return [int(v) for v in snapshot.gpu_free[row, : snapshot.nodes[row].gpu_count]]


def cpu_free(state: ClusterState, node_name: str) -> int:
    snapshot = snap(state)
    return int(snapshot.cpu_free[snapshot.node_index[node_name]])


def bound(name: str, node_name: str, held: tuple[int, ...], **fields: Any) -> PodRecord:
    """One of gpupool's pods, bound by the scheduler with a signed record giving it ``held``."""
    return pod(
        name, node=node_name, annotations=record_for(name, node_name, held, fields), **fields
    )


def record_for(
    name: str, node_name: str, held: tuple[int, ...], fields: dict[str, Any], **extra: Any
) -> dict[str, str]:
    """The record the scheduler would have written for a pod with ``fields``."""
    cores, memory = int(fields.get("cores", 0)), int(fields.get("gpu_memory", 0))
    if fields.get("mig"):
        kind, milli = "mig", 0
    elif cores or memory:
        kind, milli = "share", cores * 10
    else:
        kind, milli = "whole", 1000
    return annotated(
        node_name, held, kind, uid=f"uid-{name}", milli=milli, memory_mib=memory, **extra
    )


def modified(obj: Json, **changes: Any) -> PodRecord:
    """``obj`` after an update: the resourceVersion moves, ``changes`` land in spec/status."""
    obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
    for key, value in changes.items():
        if key == "phase":
            obj["status"]["phase"] = value
        elif key == "annotations":
            obj["metadata"]["annotations"].update(value)
        else:
            obj["spec"][key] = value
    return decode_pod(obj)


# -- pending -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "is_pending"),
    [
        pytest.param({}, True, id="ours-unbound"),
        pytest.param({"scheduler": "default-scheduler"}, False, id="other-scheduler"),
        pytest.param({"gates": ["example.com/quota"]}, False, id="gated"),
        pytest.param({"deleted": True}, False, id="being-deleted"),
        pytest.param({"phase": "Succeeded"}, False, id="succeeded"),
        pytest.param({"phase": "Failed"}, False, id="failed"),
        pytest.param(
            {"node": "n0", "annotations": annotated("n0", (0,), uid="uid-p")}, False, id="bound"
        ),
        pytest.param({"gpus": 0}, True, id="ours-cpu-only"),
    ],
)
def test_pending_holds_only_unbound_live_pods_of_this_scheduler(
    fields: dict[str, Any], is_pending: bool
) -> None:
    fields = {"gpus": 1, **fields}
    state = make_state(node("n0"), pods=(pod("p", **fields),))
    assert ("uid-p" in state.pending) is is_pending


def test_pending_without_nodes() -> None:
    state = make_state(pods=(pod("p", gpus=1),))
    assert state.snapshot is None
    assert state.pending == {"uid-p"}


def test_pending_follows_pod_updates() -> None:
    obj = pod_dict("p", gpus=1, gates=["example.com/quota"])
    state = make_state(node("n0"), pods=(decode_pod(obj),))
    assert state.pending == set()

    state.on_pod(MODIFIED, modified(obj, schedulingGates=[]))
    state.sync()
    assert state.pending == {"uid-p"}

    state.on_pod(MODIFIED, modified(obj, nodeName="n0"))
    state.sync()
    assert state.pending == set()


@pytest.mark.parametrize("how", ["deleted-event", "deletion-timestamp", "failed"])
def test_pending_pod_that_goes_away_leaves_pending(how: str) -> None:
    obj = pod_dict("p", gpus=1)
    state = make_state(node("n0"), pods=(decode_pod(obj),))
    assert state.pending == {"uid-p"}
    if how == "deleted-event":
        state.on_pod(DELETED, decode_pod(obj))
    elif how == "deletion-timestamp":
        obj["metadata"]["deletionTimestamp"] = "2025-01-01T01:00:00Z"
        state.on_pod(MODIFIED, modified(obj))
    else:
        state.on_pod(MODIFIED, modified(obj, phase="Failed"))
    state.sync()
    assert state.pending == set()


def test_pod_order_priority_then_age() -> None:
    pods = (
        pod("old-low", priority=0, created="2025-01-01T00:00:00Z"),
        pod("new-high", priority=100, created="2025-01-03T00:00:00Z"),
        pod("old-high", priority=100, created="2025-01-02T00:00:00Z"),
        pod("new-low", priority=0, created="2025-01-04T00:00:00Z"),
        pod("negative", priority=-5, created="2024-01-01T00:00:00Z"),
        pod("b-tie", priority=0, created="2025-01-01T00:00:00Z"),
        pod("a-tie", priority=0, created="2025-01-01T00:00:00Z", namespace="zz"),
    )
    names = [p.metadata.name for p in sorted(pods, key=pod_order)]
    assert names == ["old-high", "new-high", "b-tie", "old-low", "a-tie", "new-low", "negative"]


def test_standby_keeps_records_but_no_snapshot_or_changes() -> None:
    state = ClusterState("gpupool", signer=SIGNER)
    state.on_node(ADDED, node("n0"))
    for i in range(50):
        state.on_pod(ADDED, pod(f"p{i}", gpus=1))
        state.on_pod(DELETED, pod(f"p{i}", gpus=1))
    state.on_pod(ADDED, pod("kept", gpus=1))
    state.sync()
    assert state.snapshot is None
    assert state.pending == set()
    assert set(state.pods) == {"uid-kept"}
    assert not state._dirty
    state.restart()
    state.sync()
    assert state.pending == {"uid-kept"}
    state.deactivate()
    assert state.snapshot is None
    assert state.pending == set()


# -- holdings of bound pods --------------------------------------------------------------------


def test_annotated_pod_holds_exactly_its_gpus() -> None:
    state = make_state(
        node("n0", gpus=4, gpu_memory_mib=80000),
        pods=(bound("p", "n0", (1, 3), gpus=2, cpu="4", memory="8Gi"),),
    )
    snapshot = snap(state)
    assert gpu_free(state, "n0") == [1000, 0, 1000, 0]
    assert [int(v) for v in snapshot.gpu_memory_free[0, :4]] == [80000, 0, 80000, 0]
    assert snapshot.allocations["uid-p"].gpus == (1, 3)
    assert cpu_free(state, "n0") == 60_000
    assert int(snapshot.memory_free[0]) == 512 * 1024 - 8 * 1024
    assert int(snapshot.pods_free[0]) == 109
    assert snapshot.used_gpu_milli == 2000
    assert state.stats.conflicts == 0


def test_annotated_share_holds_its_share_on_its_gpu() -> None:
    state = make_state(
        node("n0", gpus=4, gpu_memory_mib=80000),
        pods=(bound("p", "n0", (2,), gpus=1, cores=30, gpu_memory=10000),),
    )
    assert gpu_free(state, "n0") == [1000, 1000, 700, 1000]
    assert int(snap(state).gpu_memory_free[0, 2]) == 70000


def test_foreign_pod_holds_cpu_memory_and_best_fit_gpus() -> None:
    foreign = pod("f", scheduler="default-scheduler", node="n0", gpus=2, cpu="3", memory="2Gi")
    state = make_state(node("n0", gpus=4), pods=(foreign,))
    snapshot = snap(state)
    assert snapshot.allocations["uid-f"].gpus == (0, 1)
    assert gpu_free(state, "n0") == [0, 0, 1000, 1000]
    assert cpu_free(state, "n0") == 61_000
    assert int(snapshot.memory_free[0]) == 512 * 1024 - 2048
    assert "uid-f" not in state.pending


def test_foreign_share_goes_to_the_fullest_gpu_that_fits() -> None:
    state = make_state(
        node("n0", gpus=4),
        pods=(
            bound("a", "n0", (2,), gpus=1, cores=30),
            bound("b", "n0", (3,), gpus=1, cores=80),
            pod("f", scheduler="default-scheduler", node="n0", gpus=1, cores=50),
        ),
    )
    assert snap(state).allocations["uid-f"].gpus == (2,)
    assert gpu_free(state, "n0") == [1000, 1000, 200, 200]


def test_foreign_cpu_only_pod_holds_cpu_and_memory() -> None:
    foreign = pod("f", scheduler="default-scheduler", node="n0", cpu="2", memory="1Gi")
    state = make_state(node("n0"), pods=(foreign,))
    assert "uid-f" in snap(state).allocations
    assert cpu_free(state, "n0") == 62_000


def test_bound_mig_pod_holds_its_slice() -> None:
    mig_node = node("m0", gpus=0, mig={"gpupool.io/mig-1g.18gb": "2"})
    state = make_state(mig_node, pods=(bound("p", "m0", (), mig="1g.18gb"),))
    assert int(snap(state).mig_free[0, 0]) == 1


def test_pod_bound_to_an_unknown_node_is_held_once_the_node_arrives() -> None:
    state = make_state(node("n0"), pods=(bound("p", "n1", (0,), gpus=1),))
    assert "uid-p" not in snap(state).allocations
    state.on_node(ADDED, node("n1"))
    state.sync()
    assert snap(state).allocations["uid-p"].gpus == (0,)
    assert gpu_free(state, "n1")[0] == 0


@pytest.mark.parametrize("how", ["Succeeded", "Failed", "DELETED"])
def test_finished_or_deleted_pod_releases_and_bumps_the_epoch(how: str) -> None:
    obj = pod_dict("p", node="n0", gpus=2, annotations=record_for("p", "n0", (0, 1), {}))
    state = make_state(node("n0", gpus=4), pods=(decode_pod(obj),))
    assert gpu_free(state, "n0") == [0, 0, 1000, 1000]
    epoch, rebuilds = state.capacity_epoch, state.stats.rebuilds
    if how == "DELETED":
        state.on_pod(DELETED, decode_pod(obj))
    else:
        state.on_pod(MODIFIED, modified(obj, phase=how))
    state.sync()
    assert gpu_free(state, "n0") == [1000] * 4
    assert "uid-p" not in snap(state).allocations
    assert cpu_free(state, "n0") == 64_000
    assert state.capacity_epoch == epoch + 1
    assert state.stats.rebuilds == rebuilds
    assert state.pending == set()


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "foreign"])
def test_terminating_pod_holds_its_gpus_until_gone(trusted: bool) -> None:
    annotations = record_for("p", "n0", (0, 1), {}) if trusted else {}
    scheduler = "gpupool" if trusted else "default-scheduler"
    obj = pod_dict("p", node="n0", gpus=2, annotations=annotations, scheduler=scheduler)
    state = make_state(node("n0", gpus=4), pods=(decode_pod(obj),))
    epoch = state.capacity_epoch
    obj["metadata"]["deletionTimestamp"] = "2025-01-01T01:00:00Z"
    state.on_pod(MODIFIED, modified(obj))  # a finalizer or the grace period keeps it running
    state.sync()
    assert gpu_free(state, "n0") == [0, 0, 1000, 1000]
    assert state.capacity_epoch == epoch
    state.on_pod(DELETED, modified(obj))
    state.sync()
    assert gpu_free(state, "n0") == [1000] * 4
    assert state.capacity_epoch == epoch + 1


def test_terminating_pod_survives_a_rebuild() -> None:
    obj = pod_dict(
        "p", node="n0", gpus=1, deleted=True, annotations=record_for("p", "n0", (2,), {})
    )
    state = make_state(node("n0", gpus=4), pods=(decode_pod(obj),))
    assert gpu_free(state, "n0") == [1000, 1000, 0, 1000]


def test_bound_pod_update_does_not_hold_twice() -> None:
    obj = pod_dict("p", node="n0", gpus=1, annotations=record_for("p", "n0", (0,), {}))
    state = make_state(node("n0"), pods=(decode_pod(obj),))
    epoch = state.capacity_epoch
    for _ in range(3):
        obj["status"]["phase"] = "Running"
        state.on_pod(MODIFIED, modified(obj))
        state.sync()
    assert snap(state).used_gpu_milli == 1000
    assert state.capacity_epoch == epoch


# -- conflicts ---------------------------------------------------------------------------------


def test_two_trusted_records_on_one_gpu_is_one_conflict_and_the_loser_is_held_foreign() -> None:
    state = make_state(
        node("n0", gpus=2),
        pods=(bound("b", "n0", (0,), gpus=1), bound("a", "n0", (0,), gpus=1)),
    )
    snapshot = snap(state)
    assert state.stats.conflicts == 1
    assert snapshot.allocations["uid-a"].gpus == (0,)  # the same winner whatever the order
    assert snapshot.allocations["uid-b"].gpus == (1,)  # held, as a foreign pod
    assert gpu_free(state, "n0") == [0, 0]


def test_trusted_record_arriving_later_displaces_a_foreign_holding() -> None:
    forged = pod(
        "forged", node="n0", gpus=1, annotations=record_for("forged", "n0", (0,), {}, signer=None)
    )
    state = make_state(node("n0", gpus=2), pods=(forged,))
    assert snap(state).allocations["uid-forged"].gpus == (0,)  # best fit, as a foreign pod
    state.on_pod(ADDED, bound("real", "n0", (0,), gpus=1))
    state.sync()
    snapshot = snap(state)
    assert snapshot.allocations["uid-real"].gpus == (0,)
    assert snapshot.allocations["uid-forged"].gpus == (1,)
    assert state.stats.conflicts == 0
    assert state.foreign == {"uid-forged"}


def test_foreign_pod_on_a_full_node_holds_what_is_left_never_nothing() -> None:
    state = make_state(
        node("n0", gpus=2, cpu="4"),
        pods=(
            bound("real", "n0", (0, 1), gpus=2, cpu="3"),
            pod("f", scheduler="default-scheduler", node="n0", gpus=1, cpu="2"),
        ),
    )
    held = snap(state).allocations["uid-f"]
    assert held.pod.cpu_milli == 1000  # what the node had left
    assert held.gpus == ()
    assert state.stats.conflicts == 1


def forged_records(uid: str) -> list[tuple[str, str]]:
    good = record_for("p", "n0", (1,), {"cores": 30, "gpu_memory": 5000})["gpupool.io/allocation"]
    unsigned = record_for("p", "n0", (1,), {"cores": 30, "gpu_memory": 5000}, signer=None)
    other_pod = record_for("q", "n0", (1,), {"cores": 30, "gpu_memory": 5000})
    record = allocation.decode(good)

    def edited(**changes: Any) -> str:
        return allocation.encode(msgspec.structs.replace(record, **changes))

    def share(**changes: Any) -> str:
        gpu = msgspec.structs.replace(record.gpus[0], **changes)
        return edited(gpus=(gpu,))

    return [
        ("not-json", "not json"),
        ("missing-node", '{"kind": "share"}'),
        ("unsigned", unsigned["gpupool.io/allocation"]),
        ("copied-from-another-pod", other_pod["gpupool.io/allocation"]),
        ("other-node", edited(node="n1")),
        ("kind", edited(kind="whole")),
        ("gpu-count", edited(gpus=(record.gpus[0], record.gpus[0]))),
        ("no-such-gpu", share(index=7)),
        ("uuid", share(uuid="GPU-elsewhere")),
        ("milli", share(milli=100)),
        ("memory", share(memory_mib=1)),
        ("mig", edited(mig_profile="1g.10gb")),
    ]


@pytest.mark.parametrize(("case", "text"), forged_records("uid-p"), ids=lambda v: str(v)[:20])
def test_untrusted_record_is_held_as_a_foreign_pod_with_a_warning(case: str, text: str) -> None:
    warnings: list[tuple[str, str]] = []
    bad = pod(
        "p",
        node="n0",
        gpus=1,
        cores=30,
        gpu_memory=5000,
        cpu="2",
        annotations={"gpupool.io/allocation": text},
    )
    state = ClusterState("gpupool", signer=SIGNER, warn=lambda p, r, m: warnings.append((r, m)))
    state.restart()
    state.on_node(ADDED, node("n0", gpus=4))
    state.on_pod(ADDED, bad)
    state.sync()
    held = snap(state).allocations["uid-p"]
    assert held.pod.gpu_milli == 300  # its request, best fit
    assert held.pod.cpu_milli == 2000
    assert state.foreign == {"uid-p"}
    assert state.stats.untrusted == 1
    assert [r for r, _ in warnings] == ["AllocationNotTrusted"]
    assert "gpupool.io/allocation" in warnings[0][1]


def test_valid_signed_record_is_trusted() -> None:
    text = record_for("p", "n0", (1,), {"cores": 30, "gpu_memory": 5000})
    good = pod("p", node="n0", gpus=1, cores=30, gpu_memory=5000, annotations=text)
    state = make_state(node("n0", gpus=4), pods=(good,))
    assert snap(state).allocations["uid-p"].gpus == (1,)
    assert state.foreign == set()
    assert state.stats.untrusted == 0


def test_pod_of_this_scheduler_bound_without_a_record_is_foreign() -> None:
    state = make_state(node("n0", gpus=4), pods=(pod("p", node="n0", gpus=1),))
    assert state.foreign == {"uid-p"}
    assert state.stats.untrusted == 1


# -- assumptions -------------------------------------------------------------------------------


def assumed_state() -> tuple[ClusterState, Json, Any]:
    obj = pod_dict("p", gpus=1, cores=40, gpu_memory=8000, cpu="2", memory="4Gi")
    state = make_state(node("n0", gpus=4), node("n1", gpus=4), pods=(decode_pod(obj),))
    spec = state.spec_of(decode_pod(obj))
    decision = bind_decision(spec, 1, "n1", (3,))
    state.assume(decision)
    return state, obj, decision


def test_assume_holds_the_decision() -> None:
    state, _, _ = assumed_state()
    assert state.assumed == {"uid-p"}
    assert state.pending == set()
    assert gpu_free(state, "n1") == [1000, 1000, 1000, 600]
    assert cpu_free(state, "n1") == 62_000


def test_assumption_survives_updates_without_a_node() -> None:
    state, obj, _ = assumed_state()
    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
    state.on_pod(MODIFIED, modified(obj))
    state.sync()
    assert state.assumed == {"uid-p"}
    assert state.pending == set()
    assert gpu_free(state, "n1") == [1000, 1000, 1000, 600]


def test_bind_event_confirms_the_assumption_without_double_counting() -> None:
    state, obj, decision = assumed_state()
    used, epoch = snap(state).used_gpu_milli, state.capacity_epoch
    state.on_pod(
        MODIFIED, modified(obj, nodeName="n1", annotations=allocation_annotation(decision))
    )
    state.sync()
    assert state.assumed == set()
    assert snap(state).used_gpu_milli == used
    assert gpu_free(state, "n1") == [1000, 1000, 1000, 600]
    assert snap(state).allocations["uid-p"].gpus == (3,)
    assert state.capacity_epoch == epoch
    assert state.stats.conflicts == 0


def test_bind_event_to_another_node_moves_the_holding() -> None:
    state, obj, _ = assumed_state()
    record = record_for("p", "n0", (1,), {"cores": 40, "gpu_memory": 8000})
    state.on_pod(MODIFIED, modified(obj, nodeName="n0", annotations=record))
    state.sync()
    assert state.assumed == set()
    assert gpu_free(state, "n1") == [1000] * 4
    assert gpu_free(state, "n0") == [1000, 600, 1000, 1000]
    assert snap(state).used_gpu_milli == 400


def test_forget_releases_and_makes_the_pod_pending_again() -> None:
    state, _, _ = assumed_state()
    epoch = state.capacity_epoch
    state.forget("uid-p")
    state.sync()
    assert state.assumed == set()
    assert gpu_free(state, "n1") == [1000] * 4
    assert snap(state).used_gpu_milli == 0
    assert state.pending == {"uid-p"}
    assert state.capacity_epoch == epoch + 1


def test_forget_of_an_unassumed_pod_keeps_its_holding() -> None:
    state = make_state(node("n0"), pods=(bound("p", "n0", (0,), gpus=1),))
    state.forget("uid-p")
    state.sync()
    assert snap(state).allocations["uid-p"].gpus == (0,)


def test_assumed_pod_deleted_releases() -> None:
    state, obj, _ = assumed_state()
    state.on_pod(DELETED, decode_pod(obj))
    state.sync()
    assert state.assumed == set()
    assert snap(state).allocations == {}
    assert state.pending == set()


def test_assumption_survives_a_node_rebuild() -> None:
    state, _, _ = assumed_state()
    rebuilds = state.stats.rebuilds
    state.on_node(MODIFIED, node("n0", gpus=4, labels={"pool": "b"}))
    state.sync()
    assert state.stats.rebuilds == rebuilds + 1
    assert state.assumed == {"uid-p"}
    assert gpu_free(state, "n1") == [1000, 1000, 1000, 600]


def test_assumption_on_a_removed_node_is_dropped() -> None:
    state, _, _ = assumed_state()
    state.on_node(DELETED, node("n1"))
    state.sync()
    assert state.assumed == set()
    assert snap(state).allocations == {}
    assert state.pending == {"uid-p"}


def test_restart_forgets_assumptions_and_rebuilds_from_records() -> None:
    state, _, _ = assumed_state()
    state.on_pod(ADDED, bound("q", "n0", (2,), gpus=1))
    state.sync()
    rebuilds = state.stats.rebuilds
    state.restart()
    state.sync()
    assert state.stats.rebuilds == rebuilds + 1
    assert state.assumed == set()
    assert state.pending == {"uid-p"}
    assert set(snap(state).allocations) == {"uid-q"}
    assert gpu_free(state, "n0") == [1000, 1000, 0, 1000]
    assert gpu_free(state, "n1") == [1000] * 4


# -- node updates ------------------------------------------------------------------------------


def test_node_heartbeat_does_not_rebuild() -> None:
    state = make_state(node("n0"), pods=(bound("p", "n0", (0,), gpus=1),))
    before, rebuilds, epoch = state.snapshot, state.stats.rebuilds, state.capacity_epoch
    state.on_node(MODIFIED, node("n0", heartbeat="2025-01-01T00:00:10Z", resource_version="2"))
    state.sync()
    assert state.stats.rebuilds == rebuilds
    assert state.snapshot is before
    assert state.capacity_epoch == epoch
    assert state.nodes["n0"].metadata.resource_version == "2"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"cpu": "32"}, id="allocatable-cpu"),
        pytest.param({"gpus": 8}, id="allocatable-gpus"),
        pytest.param({"labels": {"pool": "a"}}, id="label"),
        pytest.param({"model": "A100"}, id="model-label"),
        pytest.param({"taints": [{"key": "k", "effect": "NoSchedule"}]}, id="taint"),
        pytest.param({"unschedulable": True}, id="cordon"),
        pytest.param({"ready": False}, id="not-ready"),
    ],
)
def test_node_change_rebuilds_and_holdings_survive(change: dict[str, Any]) -> None:
    foreign = pod("f", scheduler="default-scheduler", node="n0", gpus=1, cpu="1")
    state = make_state(node("n0"), pods=(bound("p", "n0", (2,), gpus=1, cpu="1"), foreign))
    rebuilds, epoch = state.stats.rebuilds, state.capacity_epoch
    state.on_node(MODIFIED, node("n0", resource_version="2", **change))
    state.sync()
    assert state.stats.rebuilds == rebuilds + 1
    assert state.capacity_epoch > epoch
    snapshot = snap(state)
    assert snapshot.allocations["uid-p"].gpus == (2,)
    assert snapshot.allocations["uid-f"].gpus == (0,)
    assert snapshot.used_gpu_milli == 2000
    assert cpu_free(state, "n0") == snapshot.nodes[0].cpu_milli - 2000


def test_node_uuid_change_rebuilds_the_uuid_table() -> None:
    obj = node_dict("n0", gpus=2)
    state = make_state(decode_node(obj))
    assert state.uuids["n0"] == ("GPU-n0-0", "GPU-n0-1")
    obj["metadata"]["annotations"]["gpupool.io/gpu-uuids"] = "GPU-x,GPU-y"
    state.on_node(MODIFIED, decode_node(obj))
    state.sync()
    assert state.uuids["n0"] == ("GPU-x", "GPU-y")


def test_invalid_node_is_left_out_and_counted() -> None:
    state = make_state(node("n0"), node("bad", gpu_memory_mib="80GiB"))
    assert snap(state).node_names == ("n0",)
    assert state.stats.invalid_nodes == 1


def test_last_node_deleted_leaves_no_snapshot() -> None:
    state = make_state(node("n0"), pods=(pod("p", gpus=1),))
    state.on_node(DELETED, node("n0"))
    state.sync()
    assert state.snapshot is None
    assert state.pending == {"uid-p"}


# -- node checks -------------------------------------------------------------------------------

NOSCHEDULE = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


def checks_state() -> ClusterState:
    return make_state(
        node("n0", labels={"pool": "a"}),
        node("n1", ready=False, labels={"pool": "a"}),
        node("n2", unschedulable=True),
        node("n3", taints=[NOSCHEDULE], labels={"pool": "b"}),
        node("n4", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]),
    )


def test_node_checks_readiness_and_cordon() -> None:
    found = masks(checks_state(), pod("p", gpus=1, tolerations=[{"operator": "Exists"}]))
    assert found[REASON_NOT_READY] == [True, False, True, True, True]
    assert found[REASON_UNSCHEDULABLE] == [True, True, False, True, True]
    assert REASON_TAINTS not in found
    assert REASON_SELECTOR not in found


@pytest.mark.parametrize(
    ("tolerations", "mask"),
    [
        pytest.param([], [True, True, True, False, True], id="none"),
        pytest.param([{"key": "dedicated", "operator": "Exists"}], None, id="exists-key"),
        pytest.param([{"operator": "Exists"}], None, id="exists-everything"),
        pytest.param(
            [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            None,
            id="exists-key-effect",
        ),
        pytest.param(
            [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
            None,
            id="equal",
        ),
        pytest.param([{"key": "dedicated", "value": "ml"}], None, id="equal-by-default"),
        pytest.param(
            [{"key": "dedicated", "operator": "Equal", "value": "cv"}],
            [True, True, True, False, True],
            id="equal-other-value",
        ),
        pytest.param(
            [{"key": "other", "operator": "Exists"}],
            [True, True, True, False, True],
            id="exists-other-key",
        ),
        pytest.param(
            [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}],
            [True, True, True, False, True],
            id="other-effect",
        ),
    ],
)
def test_node_checks_taints(tolerations: list[Json], mask: list[bool] | None) -> None:
    found = masks(checks_state(), pod("p", gpus=1, tolerations=tolerations))
    assert found.get(REASON_TAINTS) == mask


def test_node_checks_noexecute_taint_needs_a_toleration() -> None:
    state = make_state(
        node("n0"), node("n1", taints=[{"key": "gone", "value": "", "effect": "NoExecute"}])
    )
    assert masks(state, pod("p", gpus=1))[REASON_TAINTS] == [True, False]
    tolerating = pod("q", gpus=1, tolerations=[{"key": "gone", "operator": "Exists"}])
    assert REASON_TAINTS not in masks(state, tolerating)


@pytest.mark.parametrize(
    ("selector", "mask"),
    [
        ({"pool": "a"}, [True, True, False, False, False]),
        ({"pool": "b"}, [False, False, False, True, False]),
        ({"pool": "a", "kubernetes.io/hostname": "n1"}, [False, True, False, False, False]),
        ({"pool": "c"}, [False] * 5),
    ],
)
def test_node_checks_selector(selector: dict[str, str], mask: list[bool]) -> None:
    found = masks(checks_state(), pod("p", gpus=1, selector=selector))
    assert found[REASON_SELECTOR] == mask


def test_node_checks_follow_a_label_change() -> None:
    state = checks_state()
    selecting = pod("p", gpus=1, selector={"pool": "b"})
    assert masks(state, selecting)[REASON_SELECTOR] == [False, False, False, True, False]
    state.on_node(MODIFIED, node("n0", labels={"pool": "b"}, resource_version="2"))
    state.sync()
    assert masks(state, selecting)[REASON_SELECTOR] == [True, False, False, True, False]


# -- spec cache --------------------------------------------------------------------------------


def test_spec_of_is_cached_per_resource_version() -> None:
    obj = pod_dict("p", gpus=1)
    state = make_state(node("n0"), pods=(decode_pod(obj),))
    first = state.spec_of(decode_pod(obj))
    assert state.spec_of(decode_pod(obj)) is first
    obj["spec"]["containers"][0]["resources"]["limits"]["gpupool.io/gpu"] = "2"
    second = state.spec_of(modified(obj))
    assert second.gpu_count == 2


def test_gpu_free_never_negative_after_full_node() -> None:
    pods = tuple(bound(f"p{i}", "n0", (i,), gpus=1) for i in range(4))
    state = make_state(node("n0", gpus=4), pods=(*pods, bound("x", "n0", (3,), gpus=1)))
    assert bool(np.all(snap(state).gpu_free >= 0))
    assert state.stats.conflicts >= 1  # the record conflicts, and x is held only in part
    assert snap(state).allocations["uid-x"].gpus == ()
    assert snap(state).allocations["uid-p3"].gpus == (3,)


@settings(max_examples=80, deadline=None)
@given(
    trusted=st.lists(st.integers(0, 3), unique=True, max_size=4),
    forged=st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=6),
    order=st.randoms(use_true_random=False),
)
def test_trusted_records_win_whatever_the_order_of_events(
    trusted: list[int], forged: list[tuple[int, bool]], order: Any
) -> None:
    """Forged records naming other pods' GPUs never take them, in any event order."""
    pods = [bound(f"t{gpu}", "n0", (gpu,), gpus=1) for gpu in trusted]
    for i, (gpu, signed_for_other) in enumerate(forged):
        name = f"f{i}"
        if signed_for_other and trusted:  # a real record, copied from another pod
            text = record_for(f"t{trusted[0]}", "n0", (trusted[0],), {})
        else:
            text = record_for(name, "n0", (gpu,), {}, signer=None)
        pods.append(pod(name, node="n0", gpus=1, annotations=text))
    shuffled = list(pods)
    order.shuffle(shuffled)
    incremental = make_state(node("n0", gpus=4))
    for record in shuffled:
        incremental.on_pod(ADDED, record)
        incremental.sync()
    for state in (incremental, make_state(node("n0", gpus=4), pods=tuple(pods))):
        snapshot = snap(state)
        assert bool(np.all(snapshot.gpu_free >= 0))
        for gpu in trusted:
            assert snapshot.allocations[f"uid-t{gpu}"].gpus == (gpu,)
        assert state.foreign == {f"uid-f{i}" for i in range(len(forged))}
        held_gpus = sum(len(a.gpus) for a in snapshot.allocations.values())
        assert held_gpus == min(4, len(pods))  # every pod held, none twice, never nothing


def test_a_pod_on_a_gpu_that_breaks_is_warned_once_and_keeps_its_gpu() -> None:
    warnings: list[tuple[str, str]] = []
    state = ClusterState("gpupool", signer=SIGNER, warn=lambda p, r, m: warnings.append((r, m)))
    state.restart()
    state.on_node(ADDED, node("n0", gpus=2))
    first = bound("p", "n0", (1,), gpus=1, cores=40)
    state.on_pod(ADDED, first)
    state.sync()
    assert warnings == []
    broken = node_dict("n0", gpus=2, resource_version="2")
    broken["metadata"]["annotations"]["gpupool.io/gpu-unhealthy"] = "GPU-n0-1"
    broken["status"]["allocatable"]["gpupool.io/gpu"] = "1"
    state.on_node(MODIFIED, decode_node(broken))
    state.sync()
    assert gpu_free(state, "n0") == [1000, 600]  # still held where its record says
    assert [r for r, _ in warnings] == ["GPUUnhealthy"]
    assert "GPU-n0-1" in warnings[0][1]
    state.on_pod(MODIFIED, first)
    state.invalidate()
    state.sync()
    assert len(warnings) == 1


def test_foreign_pods_hold_extra_resources_and_ports_only_as_far_as_the_node_has_them() -> None:
    """Another scheduler's pods over the node's rdma and on one port are held in part, never
    oversubscribing; a gpupool pod asking for either then fits nowhere on that node."""

    def foreign(name: str) -> PodRecord:
        obj = pod_dict(name, scheduler="default-scheduler", node="n0", cpu="1")
        main = obj["spec"]["containers"][0]
        main["resources"]["limits"]["example.com/rdma"] = "1"
        main["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        return decode_pod(obj)

    rdma_node = node_dict("n0")
    rdma_node["status"]["allocatable"]["example.com/rdma"] = "1"
    state = make_state(decode_node(rdma_node), pods=(foreign("a"), foreign("b")))
    snapshot = snap(state)
    assert {"uid-a", "uid-b"} <= set(snapshot.allocations)
    held = [snapshot.allocations[uid].pod for uid in ("uid-a", "uid-b")]
    assert sorted(p.extra_resources for p in held) == [(), (("example.com/rdma", 1),)]
    assert sorted(len(p.host_ports) for p in held) == [0, 1]
    assert snapshot.extra_free.tolist() == [[100 * 2**30, 0]]  # ephemeral-storage, rdma
    asking = foreign("c")
    assert not fits_on_node(snapshot, state.spec_of(asking), 0)
