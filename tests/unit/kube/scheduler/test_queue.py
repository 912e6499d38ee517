"""The scheduling queue: active, backoff and unschedulable pods (kube-scheduler's rules)."""

from __future__ import annotations

import pytest

from gpupool.kube.scheduler.queue import SchedulingQueue, Where
from gpupool.scheduling.wait_cause import WaitKind


def order(uid: str) -> str:
    return uid


def test_new_pending_pods_are_active_in_order() -> None:
    queue = SchedulingQueue()
    queue.update({"b", "a"}, {"a", "b"}, now=0.0)
    assert queue.pop_active(0.0, 0, order) == ["a", "b"]
    assert queue.pop_active(0.0, 0, order) == ["a", "b"]  # no outcome recorded: offered again
    queue.in_flight("a")
    queue.unschedulable("b", 0.0, 0, "no room", WaitKind.RESOURCES)
    assert queue.pop_active(0.0, 0, order) == []


@pytest.mark.parametrize(
    ("attempts", "wait"), [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)]
)
def test_backoff_doubles_from_one_second_to_ten(attempts: int, wait: float) -> None:
    assert SchedulingQueue().backoff_for(attempts) == wait


def test_a_failed_pod_waits_out_its_backoff() -> None:
    queue = SchedulingQueue()
    queue.update({"p"}, {"p"}, now=0.0)
    assert queue.pop_active(0.0, 0, order) == ["p"]
    for attempt, wait in enumerate([1.0, 2.0, 4.0, 8.0, 10.0, 10.0], start=1):
        now = 100.0 * attempt
        queue.failed("p", now, f"refused {attempt}", WaitKind.OTHER)
        assert queue.next_ready(now) == pytest.approx(wait)
        assert queue.pop_active(now + wait - 0.01, 0, order) == []
        assert queue.pop_active(now + wait, 0, order) == ["p"]
        assert queue.entries["p"].attempts == attempt


def test_reason_change_is_reported_once_and_its_kind_kept() -> None:
    queue = SchedulingQueue()
    queue.update({"p"}, {"p"}, now=0.0)
    assert queue.entries["p"].kind is None  # not tried yet
    assert queue.unschedulable("p", 0.0, 1, "0/3 nodes", WaitKind.RESOURCES)
    assert not queue.unschedulable("p", 5.0, 1, "0/3 nodes", WaitKind.RESOURCES)
    assert queue.failed("p", 6.0, "refused", WaitKind.OTHER)
    assert queue.entries["p"].kind is WaitKind.OTHER
    assert queue.deferred("p", "waiting behind q in pool p")
    assert queue.entries["p"].kind is WaitKind.BEHIND


def test_unschedulable_pod_waits_for_capacity_then_backoff() -> None:
    queue = SchedulingQueue()
    queue.update({"p"}, {"p"}, now=0.0)
    queue.pop_active(0.0, 7, order)
    queue.unschedulable("p", 0.0, 7, "no room", WaitKind.RESOURCES)
    assert queue.pop_active(50.0, 7, order) == []  # nothing changed
    assert queue.pop_active(0.5, 8, order) == []  # capacity moved, but still backing off
    assert queue.pop_active(1.0, 8, order) == ["p"]


def test_unschedulable_pods_are_flushed_after_a_while() -> None:
    queue = SchedulingQueue(flush_after=300.0)
    queue.update({"p"}, {"p"}, now=0.0)
    queue.pop_active(0.0, 1, order)
    queue.unschedulable("p", 0.0, 1, "no room", WaitKind.RESOURCES)
    assert queue.pop_active(299.0, 1, order) == []
    assert queue.pop_active(300.0, 1, order) == ["p"]


def test_in_flight_pod_keeps_its_attempts_when_its_bind_is_undone() -> None:
    queue = SchedulingQueue()
    queue.update({"p"}, {"p"}, now=0.0)
    queue.pop_active(0.0, 0, order)
    queue.in_flight("p")
    queue.update({"p"}, set(), now=0.1)  # assumed: no longer pending, but in flight
    assert queue.entries["p"].where is Where.IN_FLIGHT
    assert queue.failed("p", 0.2, "binding refused", WaitKind.OTHER)
    queue.update({"p"}, {"p"}, now=0.3)  # pending again after forget
    assert queue.entries["p"].attempts == 1
    assert queue.pop_active(0.3, 0, order) == []
    assert queue.pop_active(1.2, 0, order) == ["p"]


def test_pods_that_leave_pending_leave_the_queue() -> None:
    queue = SchedulingQueue()
    queue.update({"a", "b", "c"}, {"a", "b", "c"}, now=0.0)
    queue.update({"a"}, {"b", "c"}, now=0.0)
    queue.discard("b")
    queue.bound("c")
    assert len(queue) == 0
    assert queue.counts() == {w.value: 0 for w in Where}


def test_bad_backoff_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="backoff"):
        SchedulingQueue(initial_backoff=5.0, max_backoff=1.0)


def test_a_pod_refused_for_days_still_waits_the_cap() -> None:
    """Thousands of failed attempts: the wait stays at the cap (2.0 ** 1100 would overflow)."""
    assert SchedulingQueue().backoff_for(5_000) == 10.0


def test_a_deferred_pod_is_offered_again_at_once_and_its_reason_told_once() -> None:
    queue = SchedulingQueue()
    queue.update({"p"}, {"p"}, now=0.0)
    assert queue.pop_active(0.0, 0, order) == ["p"]
    assert queue.deferred("p", "waiting behind big in pool default")
    assert not queue.deferred("p", "waiting behind big in pool default")
    assert queue.deferred("p", "waiting behind other in pool default")
    assert queue.pop_active(0.0, 0, order) == ["p"]  # no backoff: it made no attempt
    assert queue.entries["p"].attempts == 0
