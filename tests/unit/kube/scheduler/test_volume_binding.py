"""A pod's volumes decide its node as kube-scheduler's VolumeBinding, VolumeZone and
VolumeRestrictions do: through the core's constraints, so the filter's reasons are kube's."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpupool.core.filtering import filter_nodes
from gpupool.core.snapshot import AllocationError
from gpupool.kube.client.informer import ADDED, MODIFIED
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.volumes import PersistentVolumeClaim
from gpupool.kube.scheduler.state import ClusterState
from gpupool.kube.scheduler.volume_binding import (
    REASON_BIND_CONFLICT,
    REASON_NODE_CONFLICT,
    REASON_PV_NOT_EXIST,
    REASON_ZONE,
    UNBOUND_IMMEDIATE,
    VolumeBook,
    VolumePlan,
    VolumesNotReadyError,
)
from gpupool.kube.scheduler.volume_limits import (
    REASON_MAX_VOLUME_COUNT,
    REASON_READ_WRITE_ONCE_POD,
)
from gpupool.kube.scheduler.volume_writes import VolumeWriter

from ..builders import bind_decision, decode_pod, node, pod_dict
from ..volume_builders import claim, csi_node, local_volume, storage_class

NODES = ("n1", "n2", "n3")


def _pod(*claims: str, ephemeral: str = "", name: str = "p", **fields: Any) -> PodRecord:
    """A one-GPU pod mounting ``claims`` (and an ephemeral volume named ``ephemeral``)."""
    uid = fields.pop("uid", "uid-p")
    body = pod_dict(name, uid=uid, gpus=1, **fields)
    volumes: list[dict[str, Any]] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    volumes.append({"name": "scratch", "emptyDir": {}})
    if ephemeral:
        volumes.append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    body["spec"]["volumes"] = volumes
    return decode_pod(body)


def _state(
    *claims: PersistentVolumeClaim, volumes: tuple[Any, ...] = (), classes: tuple[Any, ...] = ()
) -> ClusterState:
    state = ClusterState("gpupool")
    for name, zone in zip(NODES, ("a", "a", "b"), strict=True):
        state.on_node(ADDED, node(name, labels={"topology.kubernetes.io/zone": zone}))
    for item in claims:
        state.volumes.on_claim(ADDED, item)
    for volume in volumes:
        state.volumes.on_volume(ADDED, volume)
    for item in (storage_class("local"), *classes):
        state.volumes.on_class(ADDED, item)
    state.restart()
    state.sync()
    return state


def _placed(state: ClusterState, pod: PodRecord) -> tuple[list[bool], str]:
    assert state.snapshot is not None
    result = filter_nodes(state.snapshot, state.spec_of(pod))
    return result.mask.tolist(), result.message()


def test_a_bound_local_volume_keeps_the_pod_on_its_node_with_kubes_reason() -> None:
    state = _state(claim("data", volume="pv-2", bound=True), volumes=(local_volume("pv-2", "n2"),))
    mask, message = _placed(state, _pod("data"))
    assert mask == [False, True, False]
    assert message == f"1/3 nodes are available: 2 {REASON_NODE_CONFLICT}."


def test_the_volume_affinity_is_anded_with_the_pods_own() -> None:
    state = _state(claim("data", volume="pv-2", bound=True), volumes=(local_volume("pv-2", "n2"),))
    mask, message = _placed(state, _pod("data", selector={"kubernetes.io/hostname": "n1"}))
    assert mask == [False, False, False]
    assert REASON_NODE_CONFLICT in message
    assert "didn't match Pod's node affinity" in message


def test_a_claim_bound_to_a_missing_volume_fits_no_node() -> None:
    state = _state(claim("data", volume="gone", bound=True))
    mask, message = _placed(state, _pod("data"))
    assert mask == [False] * 3
    assert message == f"0/3 nodes are available: 3 {REASON_PV_NOT_EXIST}."


def test_a_zonal_volume_keeps_the_pod_in_its_zone() -> None:
    zonal = local_volume("pv-z", None, labels={"topology.kubernetes.io/zone": "b"})
    state = _state(claim("data", volume="pv-z", bound=True), volumes=(zonal,))
    mask, message = _placed(state, _pod("data"))
    assert mask == [False, False, True]
    assert REASON_ZONE in message


@pytest.mark.parametrize(
    ("claims", "ephemeral", "reason"),
    [
        ((), "", 'persistentvolumeclaim "data" not found'),
        ((claim("data", storage_class="fast"),), "", UNBOUND_IMMEDIATE),
        ((claim("data", storage_class=None),), "", UNBOUND_IMMEDIATE),
        ((claim("data", volume="pv-1"),), "", UNBOUND_IMMEDIATE),  # pre-bound, not yet bound
    ],
)
def test_pods_whose_claims_cannot_be_used_yet_wait_with_kubes_words(
    claims: tuple[PersistentVolumeClaim, ...], ephemeral: str, reason: str
) -> None:
    state = _state(*claims, classes=(storage_class("fast", mode="Immediate"),))
    with pytest.raises(VolumesNotReadyError, match=reason):
        state.spec_of(_pod("data"))


def test_an_ephemeral_volumes_claim_must_exist_and_be_the_pods_own() -> None:
    state = _state()
    with pytest.raises(VolumesNotReadyError, match="waiting for ephemeral volume controller"):
        state.spec_of(_pod(ephemeral="cache"))
    state.volumes.on_claim(ADDED, claim("p-cache", owner="someone-else"))
    with pytest.raises(VolumesNotReadyError, match="pod is not owner"):
        state.spec_of(_pod(ephemeral="cache"))
    state.volumes.on_claim(ADDED, claim("p-cache", owner="uid-p", version="2"))
    assert state.spec_of(_pod(ephemeral="cache")).constraints is not None  # unbound: volumes


def test_a_wait_for_first_consumer_claim_may_go_where_a_matching_volume_lives() -> None:
    volumes = (
        local_volume("small", "n1", size="1Gi"),  # too small
        local_volume("other-class", "n1", storage_class="slow"),
        local_volume("taken", "n1", claim_ref={"namespace": "default", "name": "x"}),
        local_volume("rwx", "n1", modes=("ReadWriteMany",)),  # lacks ReadWriteOnce
        local_volume("fits", "n2"),
    )
    state = _state(claim("data"), volumes=volumes)
    mask, message = _placed(state, _pod("data"))
    assert mask == [False, True, False]
    assert message == f"1/3 nodes are available: 2 {REASON_BIND_CONFLICT}."


def test_no_matching_volume_and_no_provisioner_fits_no_node() -> None:
    state = _state(claim("data"))
    assert _placed(state, _pod("data"))[0] == [False] * 3


def test_a_provisioning_class_may_provision_where_its_topology_allows() -> None:
    zonal = storage_class("zonal", provisioner="example.com/csi", zones=["b"])
    state = _state(claim("data", storage_class="zonal"), classes=(zonal,))
    assert _placed(state, _pod("data"))[0] == [False, False, True]
    anywhere = storage_class("any", provisioner="example.com/csi")
    state = _state(claim("data", storage_class="any"), classes=(anywhere,))
    assert state.spec_of(_pod("data")).constraints is None


def test_a_claim_being_provisioned_pins_the_pod_to_the_selected_node() -> None:
    selected = {"volume.kubernetes.io/selected-node": "n3"}
    anywhere = storage_class("any", provisioner="example.com/csi")
    state = _state(claim("data", storage_class="any", annotations=selected), classes=(anywhere,))
    assert _placed(state, _pod("data"))[0] == [False, False, True]


def test_a_read_write_once_pod_claim_in_use_by_another_pod_fits_no_node() -> None:
    rwop = claim("data", volume="pv-2", bound=True, modes=("ReadWriteOncePod",))
    state = _state(rwop, volumes=(local_volume("pv-2", "n2", modes=("ReadWriteOncePod",)),))
    assert _placed(state, _pod("data"))[0] == [False, True, False]
    state.on_pod(ADDED, _pod("data", uid="uid-q", name="q", node="n2"))
    mask, message = _placed(state, _pod("data"))
    assert mask == [False] * 3
    assert message.startswith(f"0/3 nodes are available: 3 {REASON_READ_WRITE_ONCE_POD}, ")


def test_the_plan_takes_the_smallest_volume_on_the_node_and_each_volume_once() -> None:
    book = VolumeBook()
    for item in (claim("a", size="5Gi"), claim("b", size="5Gi")):
        book.on_claim(ADDED, item)
    for volume in (
        local_volume("big", "n1", size="50Gi"),
        local_volume("small", "n1", size="5Gi"),
        local_volume("elsewhere", "n2", size="5Gi"),
    ):
        book.on_volume(ADDED, volume)
    book.on_class(ADDED, storage_class("local"))
    plan = book.plan(_pod("a", "b"), "n1", {"kubernetes.io/hostname": "n1"})
    assert [(v.key, c.metadata.name) for v, c in plan.bindings] == [("small", "a"), ("big", "b")]
    assert plan.provisions == ()
    with pytest.raises(VolumesNotReadyError, match=re.escape(REASON_BIND_CONFLICT)):
        book.plan(_pod("a", "b"), "n2", {"kubernetes.io/hostname": "n2"})


def test_the_plan_provisions_what_no_volume_serves() -> None:
    book = VolumeBook()
    book.on_claim(ADDED, claim("a", storage_class="any"))
    book.on_class(ADDED, storage_class("any", provisioner="example.com/csi"))
    plan = book.plan(_pod("a"), "n1", {})
    assert plan.bindings == ()
    assert [c.metadata.name for c in plan.provisions] == ["a"]


def _writer(book: VolumeBook) -> VolumeWriter:
    return VolumeWriter(api=None, book=book, labels=lambda name: {})  # type: ignore[arg-type]


def test_the_prebind_wait_ends_when_the_claims_are_bound_and_fails_when_taken_back() -> None:
    book = VolumeBook()
    selected = {"volume.kubernetes.io/selected-node": "n1"}
    made, asked = claim("made"), claim("asked", storage_class="any", annotations=selected)
    for item in (made, asked):
        book.on_claim(ADDED, item)
    ref = {"namespace": "default", "name": "made", "uid": "uid-made"}
    reserved = local_volume("pv", "n1", claim_ref=ref)
    book.on_volume(ADDED, reserved)
    plan = VolumePlan("n1", ((reserved, made),), (asked,))
    writer = _writer(book)
    assert writer._check(plan) == (None, False)  # reserved and annotated: waiting
    book.on_claim(MODIFIED, claim("made", volume="pv", bound=True, version="2"))
    assert writer._check(plan) == (None, False)  # one bound, one being provisioned
    book.on_claim(MODIFIED, claim("asked", storage_class="any", version="3"))
    failure, _ = writer._check(plan)
    assert failure is not None
    assert "selectedNode annotation reset" in failure  # its provisioner gave the node back
    book.on_claim(MODIFIED, claim("asked", volume="made-pv", bound=True, version="4"))
    assert writer._check(plan) == (None, True)
    other = {"namespace": "default", "name": "someone", "uid": "uid-someone"}
    book.on_volume(MODIFIED, local_volume("pv", "n1", claim_ref=other, version="2"))
    failure, _ = writer._check(plan)
    assert failure is not None
    assert "bound to another claim" in failure


def test_an_older_write_answer_never_replaces_a_newer_watched_object() -> None:
    book = VolumeBook()
    book.on_claim(ADDED, claim("a", version="5"))
    book.on_claim(MODIFIED, claim("a", version="4", bound=True, volume="x"))
    assert not book.claims[("default", "a")].fully_bound


def test_a_claim_already_selected_for_the_node_is_waited_on_and_elsewhere_refused() -> None:
    book = VolumeBook()
    selected = {"volume.kubernetes.io/selected-node": "n1"}
    book.on_claim(ADDED, claim("a", storage_class="any", annotations=selected))
    book.on_class(ADDED, storage_class("any", provisioner="example.com/csi"))
    assert [c.metadata.name for c in book.plan(_pod("a"), "n1", {}).provisions] == ["a"]
    with pytest.raises(VolumesNotReadyError):
        book.plan(_pod("a"), "n2", {})


def _bind_on(state: ClusterState, pod: PodRecord, node_name: str) -> None:
    """What a cycle does for a decision: translate the pod and assume it on ``node_name``."""
    assert state.snapshot is not None
    state.on_pod(ADDED, pod)
    state.sync()
    spec = state.spec_of(pod)
    row = state.snapshot.node_index[node_name]
    free = int(state.snapshot.gpu_free[row].argmax())  # a whole GPU left on it
    state.assume(bind_decision(spec, row, node_name, (free,)))


def test_a_node_at_its_csi_attach_limit_takes_no_new_volume_of_that_driver() -> None:
    ebs = "ebs.csi.aws.com"
    claims = [claim(n, volume=f"pv-{n}", bound=True) for n in ("a", "b", "c")]
    volumes = tuple(local_volume(f"pv-{n}", None, csi=ebs) for n in ("a", "b", "c"))
    state = _state(*claims, volumes=volumes)
    for name, limit in (("n1", 1), ("n2", 2)):
        state.volumes.on_csi_node(ADDED, csi_node(name, {ebs: limit}))
    _bind_on(state, _pod("a", name="holder", uid="uid-holder"), "n1")  # n1: its one slot taken
    mask, message = _placed(state, _pod("b"))
    assert mask == [False, True, True]  # n3 has no CSINode: no limit
    assert message == f"2/3 nodes are available: 1 {REASON_MAX_VOLUME_COUNT}."
    assert _placed(state, _pod("a", name="sharer", uid="uid-sharer"))[0] == [True, True, True]


def test_two_pods_of_one_cycle_cannot_share_a_read_write_once_pod_claim_or_a_last_slot() -> None:
    ebs = "ebs.csi.aws.com"
    rwop = claim("solo", volume="pv-solo", bound=True, modes=("ReadWriteOncePod",))
    others = [claim(n, volume=f"pv-{n}", bound=True) for n in ("a", "b")]
    volumes = tuple(local_volume(f"pv-{n}", None, csi=ebs) for n in ("solo", "a", "b"))
    state = _state(rwop, *others, volumes=volumes)
    state.volumes.on_csi_node(ADDED, csi_node("n2", {ebs: 1}))
    _bind_on(state, _pod("solo", name="first", uid="uid-first"), "n1")
    with pytest.raises(AllocationError, match="ReadWriteOncePod"):
        _bind_on(state, _pod("solo", name="second", uid="uid-second"), "n1")
    _bind_on(state, _pod("a", name="third", uid="uid-third"), "n2")
    with pytest.raises(AllocationError, match="exceed max volume count"):
        _bind_on(state, _pod("b", name="fourth", uid="uid-fourth"), "n2")  # 1 + 1 > 1
