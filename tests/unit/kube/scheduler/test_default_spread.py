"""A pod that states no topology spread is spread by the cluster's default, as kube-scheduler does.

The default selector is read from the Services that select the pod and its controlling
ReplicationController, ReplicaSet or StatefulSet (``helper.DefaultSelector``); the two
ScheduleAnyway constraints (hostname, maxSkew 3; zone, maxSkew 5) then break the GPU score's
ties, and a node without a zone label is still scored by hostname.
"""

from __future__ import annotations

from typing import Any

import httpx2
import msgspec
import numpy as np

from gpupool.core.constraints import Requirement
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.pod_terms import (
    SCHEDULE_ANYWAY,
    AffinityTerm,
    LabelSelector,
    PodTerms,
    SpreadConstraint,
)
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.core.topology_spread import spread_score
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import ADDED, DELETED
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.spread_owners import (
    ReplicaSetRecord,
    ReplicationControllerRecord,
    ServiceRecord,
    StatefulSetRecord,
)
from gpupool.kube.objects.translate import pod_spec
from gpupool.kube.scheduler.default_spread import HOSTNAME, ZONE, DefaultSpread

from ..builders import node, pod, pod_dict
from ..live_recorder import Recorder, live_scheduler, settle

WEB = {"app": "web", "tier": "serving"}


def _spread() -> DefaultSpread:
    return DefaultSpread(KubeAPI(httpx2.AsyncClient(base_url="https://127.0.0.1:9")))


def _object(record: type[Any], name: str, spec: dict[str, Any], namespace: str = "team") -> Any:
    body = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
    return msgspec.convert(body, record)


def _add(spread: DefaultSpread, record: Any) -> None:
    if isinstance(record, ServiceRecord):
        spread.service_informer.handler(ADDED, record)
        return
    kinds = (ReplicationControllerRecord, ReplicaSetRecord, StatefulSetRecord)
    spread.controller_informers[kinds.index(type(record))].handler(ADDED, record)


def _pod(owner: tuple[str, str, str] | None = None, **fields: Any) -> PodRecord:
    body = pod_dict("web-1", namespace="team", labels=WEB, gpus=1, **fields)
    if owner is not None:
        version, kind, name = owner
        body["metadata"]["ownerReferences"] = [
            {"apiVersion": version, "kind": kind, "name": name, "uid": "u", "controller": True}
        ]
    return msgspec.convert(body, PodRecord)


def test_a_pod_no_service_or_controller_selects_gets_no_default_spread() -> None:
    spread = _spread()
    _add(spread, _object(ServiceRecord, "other", {"selector": {"app": "db"}}))
    _add(spread, _object(ServiceRecord, "elsewhere", {"selector": {"app": "web"}}, "team-b"))
    _add(spread, _object(ServiceRecord, "headless-external", {}))  # no selector: selects none
    pod = _pod()
    assert spread.selector(pod) is None
    spec = pod_spec(pod)
    assert spread.applied(pod, spec) is spec


def test_services_and_the_controlling_replica_set_make_the_selector() -> None:
    spread = _spread()
    _add(spread, _object(ServiceRecord, "web", {"selector": {"app": "web"}}))
    replica_set = {
        "selector": {
            "matchLabels": {"tier": "serving"},
            "matchExpressions": [{"key": "track", "operator": "DoesNotExist"}],
        }
    }
    _add(spread, _object(ReplicaSetRecord, "web-7d9", replica_set))
    selector = spread.selector(_pod(("apps/v1", "ReplicaSet", "web-7d9")))
    assert selector == LabelSelector(
        (("app", "web"),),
        (Requirement("tier", "In", ("serving",)), Requirement("track", "DoesNotExist")),
    )


def test_a_replication_controller_adds_its_labels_and_a_foreign_owner_adds_nothing() -> None:
    spread = _spread()
    _add(spread, _object(ReplicationControllerRecord, "legacy", {"selector": {"tier": "serving"}}))
    _add(spread, _object(StatefulSetRecord, "db", {"selector": {"matchLabels": {"app": "web"}}}))
    assert spread.selector(_pod(("v1", "ReplicationController", "legacy"))) == LabelSelector(
        (("tier", "serving"),)
    )
    # a kind of the same name in another group is not the StatefulSet kube-scheduler reads
    assert spread.selector(_pod(("example.com/v1", "StatefulSet", "db"))) is None
    spread.controller_informers[2].handler(
        DELETED, _object(StatefulSetRecord, "db", {"selector": {"matchLabels": {"app": "web"}}})
    )
    assert spread.selector(_pod(("apps/v1", "StatefulSet", "db"))) is None


def test_the_default_is_two_schedule_anyway_constraints_and_a_pods_own_spread_wins() -> None:
    spread = _spread()
    _add(spread, _object(ServiceRecord, "web", {"selector": {"app": "web"}}))
    pod = _pod()
    terms = spread.applied(pod, pod_spec(pod)).terms
    assert terms is not None
    assert terms.system_default
    selector = LabelSelector((("app", "web"),))
    assert terms.spread == (
        SpreadConstraint(3, HOSTNAME, SCHEDULE_ANYWAY, selector),
        SpreadConstraint(5, ZONE, SCHEDULE_ANYWAY, selector),
    )
    own = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]
    stated = _pod()
    body = msgspec.to_builtins(stated)
    body["spec"]["topologySpreadConstraints"] = own
    stated = msgspec.convert(body, PodRecord)
    spec = pod_spec(stated)
    assert spread.applied(stated, spec) is spec


def _node(name: str, zone: str | None) -> NodeSpec:
    labels = {HOSTNAME: name, **({ZONE: zone} if zone else {})}
    return NodeSpec(name, 32000, 65536, labels=tuple(sorted(labels.items())))


def test_a_zoneless_node_is_scored_by_hostname_under_the_default_and_left_out_otherwise() -> None:
    snapshot = ClusterSnapshot([_node("a", "z1"), _node("b", "z1"), _node("c", None)])
    web = (("app", "web"),)
    for row, name in ((0, "team/w0"), (0, "team/w1"), (1, "team/w2")):
        snapshot.bind(PodSpec(name, 100, 100, labels=web, namespace="team"), row, ())
    selector = LabelSelector(web)
    default = tuple(
        SpreadConstraint(skew, key, SCHEDULE_ANYWAY, selector)
        for key, skew in ((HOSTNAME, 3), (ZONE, 5))
    )
    rows = np.arange(3)

    def score(system_default: bool) -> list[float]:
        terms = PodTerms(spread=default, system_default=system_default)
        newcomer = PodSpec("team/w3", 100, 100, labels=web, namespace="team", terms=terms)
        return spread_score(snapshot, newcomer, rows).tolist()

    defaulted = score(True)
    assert defaulted[2] == max(defaulted)  # no web pod there, and not left out for its zone
    assert defaulted[1] > defaulted[0]  # fewer web pods on b than on a
    stated = score(False)
    assert stated[2] == 0.0  # a stated constraint leaves a node without its key unscored


async def _placed_beside_three_replicas(service: bool) -> str:
    """Where the live scheduler binds a fourth web replica, three standing on n0.

    The replicas there ask no CPU, memory or GPU and n1 holds as many other pods: the
    placement's score ties the two nodes, so only the spread can move the fourth off n0 (a
    placement score that differs wins: in gpupool the spread only breaks ties).
    """
    recorder = Recorder()
    scheduler = live_scheduler(recorder)
    for name in ("n0", "n1"):
        scheduler._on_node(ADDED, node(name, gpus=8))
    for index in range(3):  # asking nothing, beside as many other pods on n1: a tie
        for name, labels, on in ((f"w{index}", WEB, "n0"), (f"db{index}", {"app": "db"}, "n1")):
            standing = pod(name, namespace="team", labels=labels, node=on, cpu="", memory="")
            scheduler._on_pod(ADDED, standing)
    if service:
        _add(scheduler.intake.spread, _object(ServiceRecord, "web", {"selector": {"app": "web"}}))
    scheduler._on_pod(ADDED, pod("w3", namespace="team", labels=WEB, gpus=1))
    await scheduler.cycle()
    await settle(scheduler)
    ((path, body),) = recorder.posted("/binding")
    assert path == "/api/v1/namespaces/team/pods/w3/binding"
    return str(body["target"]["name"])


async def test_the_live_scheduler_spreads_a_services_replicas_over_nodes_the_gpu_score_ties() -> (
    None
):
    assert await _placed_beside_three_replicas(service=False) == "n0"  # the tie's first node
    assert await _placed_beside_three_replicas(service=True) == "n1"


def test_a_bound_replica_under_the_default_spread_bears_on_no_other_pods_placement() -> None:
    """Its spread counts what the incoming pod's selector matches, so once bound it adds
    nothing to check for later pods; an anti-affine replica does (the symmetric rule)."""
    snapshot = ClusterSnapshot([_node("a", "z1")])
    web = (("app", "web"),)
    default = PodTerms(
        spread=(SpreadConstraint(3, HOSTNAME, SCHEDULE_ANYWAY, LabelSelector(web)),),
        system_default=True,
    )
    snapshot.bind(PodSpec("team/w0", 100, 100, labels=web, namespace="team", terms=default), 0, ())
    assert snapshot.pods_with_terms == set()
    anti = PodTerms(anti_affinity=(AffinityTerm(HOSTNAME, LabelSelector(web), None),))
    snapshot.bind(PodSpec("team/w1", 100, 100, labels=web, namespace="team", terms=anti), 0, ())
    assert snapshot.pods_with_terms == {"team/w1"}
