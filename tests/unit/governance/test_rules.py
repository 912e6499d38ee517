"""The governance rules, table by table, plus the property that an active pod is never reclaimed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.governance.decisions import Cleanup, ClearWarning, Reclaim, Release, Rule, Warn
from gpupool.governance.rules import (
    CleanupLimits,
    GovernanceSettingsError,
    Limits,
    PodFacts,
    PodPlacement,
    PodWarning,
    UsagePoint,
    decide,
    idle_since,
    phantoms,
)

LIMITS = Limits(idle_threshold_percent=10, idle_period=600, grace=120, max_share_duration=7200)
CLEANUP = CleanupLimits(crash_loop_restarts=3, not_running_timeout=300, node_not_ready_timeout=60)


def _idle_usage(
    start: float, end: float, step: float = 60, sm: float = 2
) -> tuple[UsagePoint, ...]:
    points = []
    t = start
    while t <= end:
        points.append(UsagePoint(t, sm, 1000))
        t += step
    return tuple(points)


def _pod(**kwargs: object) -> PodFacts:
    base: dict[str, object] = {"uid": "u1", "allocated_at": 0.0}
    base.update(kwargs)
    return PodFacts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pod", "now", "expected"),
    [
        # idle for 11 min under 10 %: warned
        (_pod(usage=_idle_usage(0, 660)), 660, Warn),
        # idle for 5 min only: nothing
        (_pod(usage=_idle_usage(360, 660)), 660, None),
        # warned 3 min ago, still idle: reclaimed
        (_pod(usage=_idle_usage(0, 840), warning=PodWarning(Rule.IDLE, 660)), 840, Reclaim),
        # warned 1 min ago, still idle: wait
        (_pod(usage=_idle_usage(0, 720), warning=PodWarning(Rule.IDLE, 660)), 720, None),
        # warned, active again: warning cleared, never reclaimed
        (
            _pod(
                usage=(*_idle_usage(0, 660), UsagePoint(720, 90, 1000)),
                warning=PodWarning(Rule.IDLE, 660),
            ),
            900,
            ClearWarning,
        ),
        # exempt class: never
        (_pod(usage=_idle_usage(0, 900), pod_class="serving"), 900, None),
        # not running yet: no idle rule (the not-running rule is separate)
        (_pod(usage=_idle_usage(0, 200), phase="Pending"), 200, None),
        # past its share duration: warned, then reclaimed after grace
        (_pod(usage=(UsagePoint(7300, 90),)), 7300, Warn),
        (
            _pod(usage=(UsagePoint(7500, 90),), warning=PodWarning(Rule.MAX_SHARE_DURATION, 7300)),
            7500,
            Reclaim,
        ),
        # an idle warning does not count as the duration warning
        (_pod(usage=_idle_usage(0, 7300), warning=PodWarning(Rule.IDLE, 7250)), 7300, Warn),
        # crash loop past the limit: cleaned at once
        (_pod(waiting_reason="CrashLoopBackOff", restarts=3), 10, Cleanup),
        (_pod(waiting_reason="CrashLoopBackOff", restarts=2), 10, None),
        # restarts alone (not looping now) are not abnormal
        (_pod(restarts=10), 10, None),
        # bound, not running past the timeout
        (_pod(phase="Pending", waiting_reason="ImagePullBackOff"), 301, Cleanup),
        (_pod(phase="Pending"), 299, None),
        # node NotReady past the timeout
        (_pod(node_not_ready_since=100.0), 161, Cleanup),
        (_pod(node_not_ready_since=100.0), 150, None),
        # being deleted: left alone
        (_pod(waiting_reason="CrashLoopBackOff", restarts=9, deleting=True), 10, None),
        # a warning time in the future (a tenant's edit) cannot postpone the reclaim forever
        (_pod(usage=_idle_usage(0, 840), warning=PodWarning(Rule.IDLE, 99999)), 840, None),
    ],
)
def test_decide(pod: PodFacts, now: float, expected: type | None) -> None:
    limits = Limits(
        idle_threshold_percent=10,
        idle_period=600,
        grace=120,
        max_share_duration=7200,
        exempt_classes=frozenset({"serving"}),
    )
    decision = decide(pod, limits, CLEANUP, now)
    if expected is None:
        assert decision is None
    else:
        assert isinstance(decision, expected), decision
        assert decision.pod_uid == "u1"


def test_values_name_the_rule_and_numbers() -> None:
    warn = decide(_pod(usage=_idle_usage(0, 660)), LIMITS, CLEANUP, 660)
    assert isinstance(warn, Warn)
    assert warn.rule is Rule.IDLE
    assert warn.values["idle_seconds"] == 660
    assert warn.values["threshold_percent"] == 10
    assert "rule idle" in warn.message
    assert "idle_seconds=660" in warn.message
    crash = decide(_pod(waiting_reason="CrashLoopBackOff", restarts=4), LIMITS, CLEANUP, 1)
    assert isinstance(crash, Cleanup)
    assert crash.rule is Rule.CRASH_LOOP
    assert crash.values == {"restarts": 4, "restart_limit": 3}


def test_idle_rule_off_without_threshold() -> None:
    limits = Limits(idle_threshold_percent=None, idle_period=1, grace=1)
    assert decide(_pod(usage=_idle_usage(0, 900, sm=0)), limits, CLEANUP, 900) is None


def test_memory_activity_counts_as_active() -> None:
    loading = (UsagePoint(0, 0, 0), UsagePoint(300, 0, 4000), UsagePoint(600, 0, 8000))
    assert idle_since(loading, 10, 256) is None  # memory still growing: active
    assert idle_since((*loading, UsagePoint(900, 0, 8000)), 10, 256) == 900
    assert idle_since(_idle_usage(0, 600), 10, 256) == 0


def test_agent_last_active_covers_lost_history() -> None:
    # one sample after a controller restart, but the agent saw no SM use for 20 min
    assert idle_since((UsagePoint(1200, 0),), 10, 256, last_active=0.0) == 0.0
    # SM above zero (but under threshold) now: the agent's time says nothing
    assert idle_since((UsagePoint(1200, 5),), 10, 256, last_active=0.0) == 1200
    # never idle since before the allocation
    assert idle_since((UsagePoint(1200, 0),), 10, 256, last_active=0.0, allocated_at=900) == 900


def test_queue_limit_shortens_the_pool_limit() -> None:
    assert LIMITS.with_queue_limit(3600).max_share_duration == 3600
    assert LIMITS.with_queue_limit(99999).max_share_duration == 7200
    assert Limits().with_queue_limit(60).max_share_duration == 60


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"idle_threshold_percent": 101}, "idleThreshold.gpuUtilPercent"),
        ({"grace": -1}, "grace"),
        ({"max_share_duration": 0}, "maxShareDuration"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(GovernanceSettingsError, match=field):
        Limits(**kwargs)  # type: ignore[arg-type]


def test_phantoms() -> None:
    held = {"a": "n1", "b": "n1", "c": "n2", "d": "n1", "e": "n1"}
    actual = {
        "a": PodPlacement("n1"),
        "b": PodPlacement("n1", finished=True),
        "c": PodPlacement("n3"),
    }
    found = phantoms(held, actual, in_flight=("e",))
    assert [(r.pod_uid, r.values["why"]) for r in found] == [
        ("b", "finished"),
        ("c", "moved"),
        ("d", "deleted"),
    ]
    assert all(isinstance(r, Release) and r.rule is Rule.PHANTOM for r in found)


@given(
    sm=st.lists(st.floats(min_value=10, max_value=100), min_size=1, max_size=60),
    step=st.floats(min_value=1, max_value=600),
    warned=st.none() | st.floats(min_value=0, max_value=1e5),
    extra=st.floats(min_value=0, max_value=1e6),
)
def test_active_pod_never_reclaimed(
    sm: list[float], step: float, warned: float | None, extra: float
) -> None:
    """Usage always at or above the threshold: no idle warning or reclaim, whatever the past."""
    usage = tuple(UsagePoint(i * step, value, 100) for i, value in enumerate(sm))
    limits = Limits(idle_threshold_percent=10, idle_period=0, grace=0)
    warning = None if warned is None else PodWarning(Rule.IDLE, warned)
    now = usage[-1].time + extra
    decision = decide(_pod(usage=usage, warning=warning, last_active=0.0), limits, CLEANUP, now)
    assert not isinstance(decision, Warn | Reclaim)
