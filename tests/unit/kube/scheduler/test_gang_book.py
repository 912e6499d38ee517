"""Which pods are a gang: PodGroups of both APIs, a basic group's pods alone, a gang decided whole.

The live scheduler reads Kubernetes 1.37's PodGroup (the pod names it in
``spec.schedulingGroup``) and coscheduling's (the ``scheduling.x-k8s.io/pod-group`` label); a
gang's pods are decided together even when the queue releases only some of them in a cycle.
"""

from __future__ import annotations

from typing import Any

import httpx2
import msgspec
import pytest

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import ADDED, DELETED
from gpupool.kube.objects.pod_groups import (
    LABEL_COSCHEDULING,
    CoschedulingGroupRecord,
    PodGroupRecord,
    group_key,
)
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.gang_book import GangBook
from gpupool.scheduling.decisions import GangSpec

from ..builders import node, pod_dict
from ..live_recorder import Recorder, live_scheduler, settle


def _pod(name: str, group: str = "", label: str = "", **fields: Any) -> PodRecord:
    body = pod_dict(name, namespace="ml", gpus=1, **fields)
    if group:
        body["spec"]["schedulingGroup"] = {"podGroupName": group}
    if label:
        body["metadata"].setdefault("labels", {})[LABEL_COSCHEDULING] = label
    return msgspec.convert(body, PodRecord)


def _group(name: str, policy: dict[str, Any]) -> PodGroupRecord:
    body = {"metadata": {"name": name, "namespace": "ml"}, "spec": {"schedulingPolicy": policy}}
    return msgspec.convert(body, PodGroupRecord)


def _feed(book: GangBook, record: Any, kind: str = ADDED) -> None:
    informer = 1 if isinstance(record, PodGroupRecord) else 0
    book._all[informer][1].handler(kind, record)


def test_a_pod_names_its_group_by_the_field_or_the_coscheduling_label() -> None:
    assert group_key(_pod("a", group="train")) == "ml/train"
    assert group_key(_pod("b", label="ray")) == "ml/ray"
    assert group_key(_pod("c")) == ""


def test_a_gang_is_known_by_its_min_count_and_a_basic_groups_pods_go_alone(
    book: GangBook,
) -> None:
    _feed(book, _group("train", {"gang": {"minCount": 4}}))
    _feed(book, _group("serve", {"basic": {}}))
    cosched = {"metadata": {"name": "ray", "namespace": "ml"}, "spec": {"minMember": 3}}
    _feed(book, msgspec.convert(cosched, CoschedulingGroupRecord))
    assert book.specs() == {"ml/train": GangSpec(4), "ml/ray": GangSpec(3)}
    assert book.gang_of(_pod("a", group="train")) == "ml/train"
    assert book.gang_of(_pod("b", group="serve")) == ""
    assert book.gang_of(_pod("c", label="ray")) == "ml/ray"
    assert book.gang_of(_pod("d", group="later")) == "ml/later"  # waits for its group
    _feed(book, _group("train", {"gang": {"minCount": 4}}), DELETED)
    assert "ml/train" not in book.specs()
    single = {"gang": {"minCount": 2}}
    _feed(book, msgspec.convert(
        {"metadata": {"name": "job", "namespace": "ml"},
         "spec": {"schedulingPolicy": single, "disruptionMode": {"single": {}}}},
        PodGroupRecord,
    ))  # fmt: skip
    assert book.specs()["ml/job"] == GangSpec(2, evict_alone=True)


def test_a_pod_groups_topology_constraint_names_the_label_its_pods_share() -> None:
    body = {
        "metadata": {"name": "ring", "namespace": "ml"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 8}},
            "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
        },
    }
    assert msgspec.convert(body, PodGroupRecord).gang == GangSpec(
        8, topology_key="topology.kubernetes.io/rack"
    )


async def test_the_live_scheduler_binds_a_gang_whole_when_the_queue_releases_one_pod() -> None:
    recorder = Recorder()
    scheduler = live_scheduler(recorder)
    _feed(scheduler.intake.gangs, _group("pair", {"gang": {"minCount": 2}}))
    scheduler._on_node(ADDED, node("n0", gpus=2))
    first = _pod("w0", group="pair", created="2025-01-01T00:00:00Z")
    scheduler._on_pod(ADDED, first)
    await scheduler.cycle()  # one pod of two: the gang waits, holding nothing
    await settle(scheduler)
    assert recorder.posted("/binding") == []
    scheduler._on_pod(ADDED, _pod("w1", group="pair", created="2025-01-01T00:00:05Z"))
    await scheduler.cycle()  # only w1 is new; w0 is parked, and comes with its gang
    await settle(scheduler)
    bound = sorted(path.split("/")[-2] for path, _ in recorder.posted("/binding"))
    assert bound == ["w0", "w1"]


@pytest.fixture
def book() -> GangBook:
    return GangBook(KubeAPI(httpx2.AsyncClient(base_url="https://127.0.0.1:9")), lambda: None)
