"""Pods gpupool removes: grace capped by the pool, a budget-refused eviction deleted past a wait."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.governance.audit import Auditor
from gpupool.kube.governance.facts import GovernanceSettings
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.departures import Departures, Outcome
from gpupool.policy.spec import EvictionSpec
from gpupool.store.records import AuditAction, AuditEvent

from ..builders import decode_pod, pod_dict

Json = dict[str, Any]
REFUSED = {"kind": "Status", "code": 429, "message": "Cannot evict pod as it would violate..."}


class Server:
    """Answers evictions with ``eviction`` (a status) and deletes with 200; keeps requests."""

    def __init__(self, eviction: int = 201) -> None:
        self.eviction = eviction
        self.requests: list[tuple[str, str, Json]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content) if request.content else {}
        self.requests.append((request.method, request.url.path, body))
        if request.url.path.endswith("/eviction") and self.eviction != 201:
            return httpx2.Response(self.eviction, json={**REFUSED, "code": self.eviction})
        return httpx2.Response(201 if request.method == "POST" else 200, json={})

    def methods(self) -> list[str]:
        return [method for method, _, _ in self.requests]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def victim(grace: int | None = None) -> PodRecord:
    obj = pod_dict("trainer", namespace="team", node="n0", gpus=1)
    if grace is not None:
        obj["spec"]["terminationGracePeriodSeconds"] = grace
    return decode_pod(obj)


def departures(server: Server, clock: Clock, terms: EvictionSpec) -> Departures:
    client = httpx2.AsyncClient(base_url="https://api", transport=httpx2.MockTransport(server))
    return Departures(KubeAPI(client), lambda _: terms, lambda _: ("team/keep",), clock)


@pytest.mark.parametrize(
    ("own", "cap", "given", "capped"),
    [
        pytest.param(600, 30, 30, True, id="a-long-grace-capped-by-the-pool"),
        pytest.param(10, 30, 10, False, id="a-short-grace-kept"),
        pytest.param(None, 30, 30, False, id="no-grace-the-kubernetes-default"),
        pytest.param(None, 5, 5, True, id="the-default-capped-by-a-smaller-pool-cap"),
    ],
)
async def test_an_evicted_pod_gets_the_smaller_of_its_grace_and_the_pools_cap(
    own: int | None, cap: int, given: int, capped: bool
) -> None:
    server = Server()
    departure = await departures(server, Clock(), EvictionSpec(max_grace=cap)).remove(victim(own))
    assert departure.outcome is Outcome.EVICTED
    ((method, path, body),) = server.requests
    assert (method, path) == ("POST", "/api/v1/namespaces/team/pods/trainer/eviction")
    options = {"preconditions": {"uid": "uid-trainer"}, "gracePeriodSeconds": given}
    assert body["deleteOptions"] == options
    assert departure.note.startswith(f"grace {given} s")
    assert ("capped by the pool's maxEvictionGracePeriodSeconds" in departure.note) is capped


async def test_a_refused_eviction_is_retried_until_the_wait_and_then_the_pod_deleted() -> None:
    server, clock = Server(eviction=429), Clock()
    leaving = departures(server, clock, EvictionSpec(budget_wait=5.0, max_grace=20))
    pod = victim(grace=3600)
    for now in (0.0, 2.0, 4.9):
        clock.now = now
        departure = await leaving.remove(pod)
        assert departure.outcome is Outcome.REFUSED
        assert "PodDisruptionBudget allows no disruption" in departure.note
    assert leaving.wait_left(pod) == pytest.approx(0.1)
    assert server.methods() == ["POST"] * 3
    clock.now = 5.0  # the eviction is asked once more: a budget that frees up is obeyed
    departure = await leaving.remove(pod)
    assert departure.outcome is Outcome.DELETED
    method, path, body = server.requests[-1]
    assert server.methods()[-2:] == ["POST", "DELETE"]
    assert (method, path) == ("DELETE", "/api/v1/namespaces/team/pods/trainer")
    assert body["gracePeriodSeconds"] == 20
    assert body["preconditions"] == {"uid": "uid-trainer"}
    assert departure.note.startswith(
        "PodDisruptionBudget team/keep blocked eviction for 5 s; deleted past the pool's "
        "disruptionBudgetWait (5 s), grace 20 s"
    )
    assert leaving.deleted == 1
    assert leaving.refused == {}


async def test_an_accepted_eviction_restarts_the_wait_of_a_later_refusal() -> None:
    server, clock = Server(eviction=429), Clock()
    leaving = departures(server, clock, EvictionSpec(budget_wait=5.0))
    pod = victim()
    assert (await leaving.remove(pod)).outcome is Outcome.REFUSED
    server.eviction, clock.now = 201, 1.0
    assert (await leaving.remove(pod)).outcome is Outcome.EVICTED
    server.eviction, clock.now = 429, 10.0
    assert (await leaving.remove(pod)).outcome is Outcome.REFUSED  # a fresh refusal: waits again
    assert "DELETE" not in server.methods()


async def test_a_pool_that_waits_zero_seconds_deletes_on_the_first_refusal() -> None:
    server = Server(eviction=429)
    leaving = departures(server, Clock(), EvictionSpec(budget_wait=0.0))
    departure = await leaving.remove(victim())
    assert departure.outcome is Outcome.DELETED
    assert server.methods() == ["POST", "DELETE"]


async def test_a_pod_already_gone_is_settled_without_a_delete() -> None:
    server = Server(eviction=404)
    departure = await departures(server, Clock(), EvictionSpec()).remove(victim())
    assert departure.outcome is Outcome.GONE
    assert server.methods() == ["POST"]


async def test_refusals_far_apart_start_a_new_wait() -> None:
    server, clock = Server(eviction=429), Clock()
    leaving = departures(server, clock, EvictionSpec(budget_wait=5.0))
    pod = victim()
    assert (await leaving.remove(pod)).outcome is Outcome.REFUSED
    clock.now = 3600.0  # chosen again an hour later: evicted first, not deleted
    assert (await leaving.remove(pod)).outcome is Outcome.REFUSED
    assert leaving.wait_left(pod) == 5.0
    clock.now = 3605.0
    assert (await leaving.remove(pod)).outcome is Outcome.DELETED


async def test_a_preemption_victims_departure_is_audited_with_its_note() -> None:
    class Writer:
        def __init__(self) -> None:
            self.events: list[AuditEvent] = []

        async def audit(self, event: AuditEvent) -> None:
            self.events.append(event)

    writer = Writer()
    auditor = Auditor(writer, "replica")  # type: ignore[arg-type]
    note = "Preempted by owner/mine (rule reclaim); PodDisruptionBudget team/keep blocked ..."
    auditor.decision(victim(), "preempt", note, GovernanceSettings(), 0.0)
    for _ in range(5):
        await asyncio.sleep(0)
    (event,) = writer.events
    assert (event.action, event.key, event.reason) == (
        AuditAction.PREEMPT,
        "preempt/uid-trainer",
        note,
    )
    assert (event.namespace, event.name, event.values) == ("team", "trainer", {})
