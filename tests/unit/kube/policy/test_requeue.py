"""Work gpupool evicts keeps its queue place: the pod its controller makes again queues from the
evicted pod's creation; a bare pod's eviction says its work ends; a tenant's pod of another
controller, or one created earlier anyway, takes nothing."""

from __future__ import annotations

from typing import Any

import httpx2

from gpupool.core.model import PodSpec
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import pod_spec
from gpupool.kube.policy.book import PolicyBook, epoch_seconds
from gpupool.kube.policy.requeue import COMPLETION_INDEX, KEEP_S, Requeue, work_key
from gpupool.kube.scheduler.departures import Departures, Outcome
from gpupool.policy.spec import EvictionSpec

from ..builders import decode_pod, pod_dict

EARLY, LATE = "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"


def _owned(
    name: str,
    kind: str = "Job",
    owner_uid: str = "job-uid",
    *,
    created: str = LATE,
    namespace: str = "team",
    index: str | None = None,
) -> PodRecord:
    obj: dict[str, Any] = pod_dict(name, namespace=namespace, gpus=1, created=created)
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": kind, "name": "train", "uid": owner_uid,
         "controller": True}
    ]  # fmt: skip
    if index is not None:
        obj["metadata"].setdefault("labels", {})[COMPLETION_INDEX] = index
    return decode_pod(obj)


def test_a_jobs_recreated_pod_takes_the_evicted_pods_place_once_and_keeps_it() -> None:
    requeue = Requeue(clock=lambda: 0.0)
    evicted = _owned("train-a", created=EARLY)
    requeue.left(evicted, epoch_seconds(EARLY))
    again, other = _owned("train-b"), _owned("train-c")
    assert requeue.place(again, epoch_seconds(LATE)) == epoch_seconds(EARLY)
    assert requeue.place(again, epoch_seconds(LATE)) == epoch_seconds(EARLY)  # the same answer
    assert requeue.place(other, epoch_seconds(LATE)) == epoch_seconds(LATE)  # one place, one pod


def test_an_indexed_jobs_place_goes_to_the_pod_of_the_same_index() -> None:
    requeue = Requeue(clock=lambda: 0.0)
    requeue.left(_owned("train-0", index="0", created=EARLY), epoch_seconds(EARLY))
    assert requeue.place(_owned("x-1", index="1"), epoch_seconds(LATE)) == epoch_seconds(LATE)
    assert requeue.place(_owned("x-0", index="0"), epoch_seconds(LATE)) == epoch_seconds(EARLY)


def test_another_namespace_or_controller_or_an_older_pod_takes_nothing() -> None:
    requeue = Requeue(clock=lambda: 0.0)
    requeue.left(_owned("train-a", created=EARLY), epoch_seconds(EARLY))
    late = epoch_seconds(LATE)
    assert requeue.place(_owned("b", namespace="other"), late) == late
    assert requeue.place(_owned("c", owner_uid="another-job"), late) == late
    older = epoch_seconds("2025-06-01T00:00:00Z")
    assert requeue.place(_owned("d"), older) == older  # its own place is earlier: kept
    assert requeue.place(_owned("e"), late) == epoch_seconds(EARLY)  # still there to take


def test_a_place_not_taken_within_a_day_is_forgotten() -> None:
    now = [0.0]
    requeue = Requeue(clock=lambda: now[0])
    requeue.left(_owned("a", created=EARLY), epoch_seconds(EARLY))
    now[0] = KEEP_S + 1
    requeue.left(_owned("other", owner_uid="other-job"), epoch_seconds(LATE))  # prunes
    assert requeue.place(_owned("b"), epoch_seconds(LATE)) == epoch_seconds(LATE)


def test_a_pod_evicted_again_passes_on_the_place_it_had_taken() -> None:
    requeue = Requeue(clock=lambda: 0.0)
    requeue.left(_owned("first", created=EARLY), epoch_seconds(EARLY))
    second = _owned("second")
    assert requeue.place(second, epoch_seconds(LATE)) == epoch_seconds(EARLY)
    requeue.left(second, epoch_seconds(LATE))
    assert requeue.place(_owned("third"), epoch_seconds(LATE)) == epoch_seconds(EARLY)


def test_a_bare_pod_has_no_work_key_and_a_statefulset_pod_keeps_its_name() -> None:
    assert work_key(decode_pod(pod_dict("bare", gpus=1))) is None
    assert work_key(_owned("db-0", kind="StatefulSet")) == ("team", "job-uid", "db-0")


def test_the_policy_book_orders_the_recreated_pod_at_the_evicted_pods_place() -> None:
    book = PolicyBook("gpupool")
    book.evicted(_owned("train-a", created=EARLY))
    again = _owned("train-b")
    spec = book.workload(again, _spec(again))
    assert spec.created_at == epoch_seconds(EARLY)
    book.forget(again.metadata.uid)
    third = _owned("train-c")
    assert book.workload(third, _spec(third)).created_at == epoch_seconds(LATE)


def _spec(pod: PodRecord) -> PodSpec:
    return pod_spec(pod)


async def test_an_eviction_tells_the_book_and_says_whether_the_work_runs_again() -> None:
    left: list[str] = []
    client = httpx2.AsyncClient(
        base_url="https://api", transport=httpx2.MockTransport(lambda _: httpx2.Response(201))
    )
    departures = Departures(
        KubeAPI(client),
        lambda _: EvictionSpec(),
        lambda _: (),
        on_left=lambda pod: left.append(pod.metadata.name),
    )
    owned = await departures.remove(_owned("train-a"))
    bare = await departures.remove(decode_pod(pod_dict("bare", namespace="team", gpus=1)))
    assert (owned.outcome, bare.outcome) == (Outcome.EVICTED, Outcome.EVICTED)
    assert owned.note.endswith("; its Job train recreates it, queued at this pod's place")
    assert bare.note.endswith("; no controller recreates it: its work ends here")
    assert left == ["train-a", "bare"]
