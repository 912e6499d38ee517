"""The live cycle applies the engine's decisions to the cache and the API: admit, wait, preempt.

The API server is an in-process recorder here (the real one is in
tests/integration/test_policy_live.py): it answers Bindings and Evictions and keeps every
request, so each test can check exactly what the scheduler asked for.
"""

from __future__ import annotations

import time
from typing import Any

from gpupool.kube.client.informer import ADDED, DELETED, MODIFIED
from gpupool.kube.objects import allocation
from gpupool.kube.policy.book import epoch_seconds
from gpupool.scheduling.runtime import DEFAULT_RUNTIME

from ..builders import SIGNER, annotated, node, pod
from ..live_recorder import Recorder, add_policy, live_scheduler, reasons_of, reports_of, settle

Json = dict[str, Any]


async def test_admit_binds_with_pool_and_queue_and_a_ceiling_holds_the_next_pod() -> None:
    recorder = Recorder()
    scheduler = live_scheduler(recorder)
    add_policy(scheduler, "GPUPool", "x", {"mode": "Exclusive", "nodeSelector": {"pool": "x"}})
    add_policy(
        scheduler, "GPUQueue", "q", {"namespaces": ["ml"], "quotas": [{"pool": "x", "ceiling": 1}]}
    )
    scheduler._on_node(ADDED, node("n0", gpus=2, labels={"pool": "x"}))
    scheduler._on_pod(ADDED, pod("first", namespace="ml", gpus=1, created="2025-01-01T00:00:00Z"))
    scheduler._on_pod(ADDED, pod("second", namespace="ml", gpus=1, created="2025-01-01T00:00:05Z"))
    await scheduler.cycle()
    await settle(scheduler)

    ((path, body),) = recorder.posted("/binding")
    assert path == "/api/v1/namespaces/ml/pods/first/binding"
    record = allocation.decode(body["metadata"]["annotations"]["gpupool.io/allocation"])
    assert (record.pool, record.queue, record.node) == ("x", "q", "n0")
    assert SIGNER.verify(record, "uid-first")  # the new fields are signed too
    reasons = reasons_of(reports_of(scheduler))
    assert reasons == {"second": "queue q: ceiling 1 GPU units reached in pool x"}
    # the admitted pod is charged to its queue, incrementally, at the next cycle
    await scheduler.cycle()
    assert scheduler.book.ledger.used.sum() == 1000
    assert set(scheduler.book.running) == {"uid-first"}


async def test_a_bound_pod_relabelled_to_another_queue_stays_charged_to_its_recorded_queue() -> (
    None
):
    """The label changed past admission (an administrator, no admission policy) moves no charge.

    Charged to ``wide`` by its label, the pod would leave ``narrow``'s ceiling free for a
    second pod while the cost ledger, which reads the signed record, still charged ``narrow``.
    """
    recorder = Recorder()
    scheduler = live_scheduler(recorder)
    add_policy(scheduler, "GPUPool", "x", {"mode": "Exclusive", "nodeSelector": {"pool": "x"}})
    for name, ceiling in (("narrow", 1), ("wide", 8)):
        quotas = [{"pool": "x", "ceiling": ceiling}]
        add_policy(scheduler, "GPUQueue", name, {"namespaces": ["ml"], "quotas": quotas})
    scheduler._on_node(ADDED, node("n0", gpus=2, labels={"pool": "x"}))
    narrow = {"gpupool.io/queue": "narrow"}
    scheduler._on_pod(ADDED, pod("first", namespace="ml", gpus=1, labels=narrow))
    await scheduler.cycle()
    await settle(scheduler)
    ((_, body),) = recorder.posted("/binding")
    annotations = body["metadata"]["annotations"]
    assert allocation.decode(annotations["gpupool.io/allocation"]).queue == "narrow"

    relabelled = pod(
        "first",
        namespace="ml",
        gpus=1,
        node="n0",
        phase="Running",
        annotations=annotations,
        labels={"gpupool.io/queue": "wide"},
        resource_version="2",
    )
    scheduler._on_pod(MODIFIED, relabelled)
    scheduler._on_pod(ADDED, pod("second", namespace="ml", gpus=1, labels=narrow))
    await scheduler.cycle()
    await settle(scheduler)
    book = scheduler.book
    assert book.policy is not None
    queues = [q.name for q in book.policy.tables.queues]
    assert queues[book.running["uid-first"].queue] == "narrow"
    assert book.ledger.used[queues.index("wide")].sum() == 0
    assert len(recorder.posted("/binding")) == 1  # narrow's ceiling still holds the second
    assert reasons_of(reports_of(scheduler))["second"] == (
        "queue narrow: ceiling 1 GPU units reached in pool x"
    )


async def test_preemption_evicts_nominates_and_binds_the_preemptor_once_the_victim_is_gone() -> (
    None
):
    recorder = Recorder()
    scheduler = live_scheduler(recorder)
    scheduler._on_node(ADDED, node("n0", gpus=1))
    low = pod(
        "low", gpus=1, node="n0", priority=1, annotations=annotated("n0", (0,), uid="uid-low")
    )
    scheduler._on_pod(ADDED, low)
    scheduler._on_pod(ADDED, pod("high", gpus=1, priority=100))
    await scheduler.cycle()
    await settle(scheduler)

    ((path, body),) = recorder.posted("/eviction")
    assert path == "/api/v1/namespaces/default/pods/low/eviction"
    assert body["deleteOptions"]["preconditions"]["uid"] == "uid-low"
    assert scheduler.preemptions.nominated == {"uid-high": "n0"}
    reports = reports_of(scheduler)
    assert any(b.get("status") == {"nominatedNodeName": "n0"} for _, _, b, _ in reports)
    notes = {b["regarding"]["name"]: b["note"] for m, _, b, _ in reports if m == "POST"}
    assert "default/high" in notes["low"]
    assert "rule priority" in notes["low"]
    assert reasons_of(reports)["high"].startswith("nominated to node n0")

    # the victim terminates (still holding its GPU): the preemptor waits, nobody else is evicted
    scheduler._on_pod(
        ADDED,
        pod(
            "low",
            gpus=1,
            node="n0",
            priority=1,
            deleted=True,
            annotations=annotated("n0", (0,), uid="uid-low"),
            resource_version="2",
        ),
    )
    await scheduler.cycle()
    await settle(scheduler)
    assert len(recorder.posted("/eviction")) == 1
    assert not recorder.posted("/binding")

    scheduler._on_pod(DELETED, low)
    await scheduler.cycle()
    await settle(scheduler)
    ((path, _),) = recorder.posted("/binding")
    assert path == "/api/v1/namespaces/default/pods/high/binding"
    assert scheduler.preemptions.nominated == {}
    assert scheduler.stats.preemptions == 1


async def test_a_budget_refusing_the_eviction_becomes_the_preemptors_reason() -> None:
    recorder = Recorder(evictions=429)
    scheduler = live_scheduler(recorder)
    scheduler._on_node(ADDED, node("n0", gpus=1))
    scheduler._on_pod(
        ADDED,
        pod("low", gpus=1, node="n0", priority=1, annotations=annotated("n0", (0,), uid="uid-low")),
    )
    scheduler._on_pod(ADDED, pod("high", gpus=1, priority=100))
    try:
        await scheduler.cycle()
        await settle(scheduler)
        assert "disruption budget" in scheduler.preemptions.evictor.blocked_reason("uid-high")
        reports_of(scheduler)
        await scheduler.cycle()  # the refusal woke the loop; the nominated pod is decided again
        reason = reasons_of(reports_of(scheduler))["high"]
        assert reason.startswith("waiting for eviction of default/low: a PodDisruptionBudget")
        assert not recorder.posted("/binding")
        assert all(method != "DELETE" for method, _, _ in recorder.requests)
    finally:
        scheduler.preemptions.evictor.cancel_all()


async def test_status_reports_a_node_two_pools_select_and_a_queue_left_out() -> None:
    scheduler = live_scheduler(Recorder())
    add_policy(scheduler, "GPUPool", "a", {"mode": "Exclusive", "nodeSelector": {"rack": "1"}})
    add_policy(scheduler, "GPUPool", "b", {"mode": "Shared", "nodeSelector": {"rack": "1"}})
    add_policy(scheduler, "GPUPool", "c", {"mode": "Exclusive", "nodeSelector": {"rack": "2"}})
    add_policy(scheduler, "GPUQueue", "lost", {"namespaces": ["x"], "quotas": [{"pool": "zz"}]})
    scheduler._on_node(ADDED, node("both", gpus=4, labels={"rack": "1"}))
    scheduler._on_node(ADDED, node("only-c", gpus=8, labels={"rack": "2"}))
    scheduler._on_pod(ADDED, pod("p", gpus=1))  # whole GPU: the Exclusive pools, not the node
    await scheduler.cycle()
    await settle(scheduler)
    await scheduler.cycle()
    status = scheduler.desired_status()
    pool_a = status["/apis/gpupool.io/v1alpha1/gpupools/a"]
    conflict = pool_a["conditions"][0]
    assert (conflict["type"], conflict["status"]) == ("NodeConflict", "True")
    assert "both" in conflict["message"]
    assert (pool_a["nodes"], pool_a["gpus"]) == (0, 0)  # the contested node is in no pool
    pool_c = status["/apis/gpupool.io/v1alpha1/gpupools/c"]
    assert (pool_c["nodes"], pool_c["gpus"], pool_c["pods"], pool_c["allocatedGPUUnits"]) == (
        1,
        8,
        1,
        1.0,
    )
    lost = status["/apis/gpupool.io/v1alpha1/gpuqueues/lost"]["conditions"][0]
    assert (lost["type"], lost["status"], lost["reason"]) == ("Valid", "False", "InvalidSpec")
    assert "spec.quotas" in lost["message"]


async def test_a_nomination_is_given_up_when_its_victims_are_gone_and_the_room_was_taken() -> None:
    recorder = Recorder()
    scheduler = live_scheduler(recorder)
    scheduler._on_node(ADDED, node("n0", gpus=1))
    low = pod(
        "low", gpus=1, node="n0", priority=1, annotations=annotated("n0", (0,), uid="uid-low")
    )
    scheduler._on_pod(ADDED, low)
    scheduler._on_pod(ADDED, pod("high", gpus=1, priority=100))
    await scheduler.cycle()
    await settle(scheduler)
    assert scheduler.preemptions.nominated == {"uid-high": "n0"}
    # the victim goes, but another scheduler's pod takes the GPU first
    scheduler._on_pod(DELETED, low)
    scheduler.state.sync()  # the release is seen before the other pod (no cycle in between)
    scheduler._on_pod(ADDED, pod("other", gpus=1, node="n0", scheduler="default-scheduler"))
    await scheduler.cycle()
    await settle(scheduler)
    assert scheduler.preemptions.nominated == {}
    assert not recorder.posted("/binding")


async def test_a_pod_that_succeeds_teaches_its_queue_a_runtime() -> None:
    scheduler = live_scheduler(Recorder())
    scheduler._on_node(ADDED, node("n0", gpus=1))
    bound = pod("job", gpus=1, node="n0", annotations=annotated("n0", (0,), uid="uid-job"))
    scheduler._on_pod(ADDED, bound)
    await scheduler.cycle()
    assert "uid-job" in scheduler.book.running
    probe = scheduler.book.running["uid-job"].workload
    before = scheduler.book.runtimes.estimate(probe, "default")
    done = pod(
        "job",
        gpus=1,
        node="n0",
        phase="Succeeded",
        resource_version="2",
        annotations=annotated("n0", (0,), uid="uid-job"),
    )
    scheduler._on_pod(ADDED, done)
    after = scheduler.book.runtimes.estimate(probe, "default")
    # it ran from its creation (the record names no time) until now
    ran = time.time() - epoch_seconds("2025-01-01T00:00:00Z")
    assert before == DEFAULT_RUNTIME
    assert abs(after - ran) < 60
    await scheduler.cycle()
    assert "uid-job" not in scheduler.book.running
    assert scheduler.book.ledger.used.sum() == 0


async def test_a_pod_whose_selector_rules_out_the_cheapest_victim_evicts_on_its_own_node() -> None:
    """young on n1 would lose least, but the preemptor's selector names n0: old is evicted."""
    recorder = Recorder()
    scheduler = live_scheduler(recorder)
    scheduler._on_node(ADDED, node("n0", gpus=1, labels={"zone": "a"}))
    scheduler._on_node(ADDED, node("n1", gpus=1, labels={"zone": "b"}))
    for name, at, started in (
        ("old", "n0", "2025-01-01T00:00:00Z"),
        ("young", "n1", "2025-01-01T01:00:00Z"),
    ):
        bound = pod(
            name, gpus=1, node=at, priority=1, created=started,
            annotations=annotated(at, (0,), uid=f"uid-{name}"),
        )  # fmt: skip
        scheduler._on_pod(ADDED, bound)
    scheduler._on_pod(ADDED, pod("high", gpus=1, priority=100, selector={"zone": "a"}))
    await scheduler.cycle()
    await settle(scheduler)

    ((path, _),) = recorder.posted("/eviction")
    assert path == "/api/v1/namespaces/default/pods/old/eviction"
    assert scheduler.preemptions.nominated == {"uid-high": "n0"}
    reason = reasons_of(reports_of(scheduler))["high"]
    assert reason.startswith("nominated to node n0: preempting 1")
