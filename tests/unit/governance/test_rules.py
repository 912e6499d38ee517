"""The governance rules, table by table, plus the property that an active pod is never reclaimed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.core.model import PodSpec
from gpupool.governance.decisions import Cleanup, ClearWarning, Reclaim, Release, Rule, Warn
from gpupool.governance.rules import (
    CleanupLimits,
    GovernanceSettingsError,
    Limits,
    PodFacts,
    PodPlacement,
    PodWarning,
    decide,
    idle_period,
    idle_since,
    phantoms,
)
from gpupool.governance.usage import UsageHistory, UsagePoint
from gpupool.policy.units import compute_fraction

LIMITS = Limits(idle_threshold_percent=10, idle_period=600, grace=120, max_share_duration=7200)
CLEANUP = CleanupLimits(crash_loop_restarts=3, not_running_timeout=300, node_not_ready_timeout=60)


def _history(*points: UsagePoint, limits: Limits = LIMITS) -> UsageHistory:
    return UsageHistory.of(points, limits.activity)


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
    """Facts of pod u1; ``usage`` as samples, folded under :data:`LIMITS`' activity."""
    base: dict[str, object] = {"uid": "u1", "allocated_at": 0.0}
    base.update(kwargs)
    points = base.get("usage", ())
    assert isinstance(points, tuple)
    base["usage"] = _history(*points)
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
    assert idle_since(_history(*loading)) is None  # memory still growing: active
    assert idle_since(_history(*loading, UsagePoint(900, 0, 8000))) == 900
    assert idle_since(_history(*_idle_usage(0, 600))) == 0


def test_memory_busy_counts_as_active_unless_turned_off() -> None:
    """A checkpoint copied to the host: SM 0, memory held steady, memory controller busy."""
    copying = [UsagePoint(t, 0, 8000, 12) for t in range(0, 1200, 60)]
    assert idle_since(_history(*copying)) is None
    blind = Limits(idle_threshold_percent=10, memory_busy_percent=None)
    assert idle_since(_history(*copying, limits=blind)) == 0
    under = [UsagePoint(t, 0, 8000, 0.5) for t in range(0, 1200, 60)]  # below the 1 % default
    assert idle_since(_history(*under)) == 0
    pod = _pod(usage=(*_idle_usage(0, 600, sm=0), UsagePoint(660, 0, 1000, 30)))
    assert decide(pod, LIMITS, CLEANUP, 660) is None  # busy at the last sample: not warned


@pytest.mark.parametrize(("milli", "busy_sm"), [(100, 9.5), (250, 24), (1000, 95)])
def test_a_share_working_flat_out_is_active_on_the_whole_gpus_scale(
    milli: int, busy_sm: float
) -> None:
    """NVML's SM figure is a part of the whole GPU: a capped share reads at most its part."""
    share = PodSpec("s", cpu_milli=0, memory_mib=0, gpu_count=1, gpu_milli=milli)
    activity = LIMITS.activity_for(compute_fraction(share))
    flat_out = [UsagePoint(t, busy_sm, 1000) for t in range(0, 1200, 60)]
    assert idle_since(UsageHistory.of(flat_out, activity)) is None
    part = milli / 10  # the share's part of the GPU, in percent
    quiet = [UsagePoint(t, 0.05 * part, 1000) for t in range(0, 1200, 60)]
    assert idle_since(UsageHistory.of(quiet, activity)) == 0  # 5 % of its part: idle
    if busy_sm < 10:  # under the whole GPU's threshold the busy share would have been idle
        assert idle_since(UsageHistory.of(flat_out, LIMITS.activity)) == 0


def test_a_shares_audit_shows_the_threshold_it_was_judged_by() -> None:
    """A 10 % share reclaimed under a 10 % pool threshold was judged at 1 %: its record says
    so, beside the pool's figure, or a reader would think it ran under 10 % and was idle."""
    fraction = compute_fraction(PodSpec("s", cpu_milli=0, memory_mib=0, gpu_count=1, gpu_milli=100))
    quiet = tuple(UsagePoint(t, 0.5, 1000) for t in range(0, 720, 60))
    history = UsageHistory.of(quiet, LIMITS.activity_for(fraction))
    pod = PodFacts(uid="u1", allocated_at=0.0, usage=history, compute_fraction=fraction)
    warn = decide(pod, LIMITS, CLEANUP, 660)
    assert isinstance(warn, Warn)
    assert warn.values["threshold_percent"] == pytest.approx(1.0)
    assert warn.values["pool_threshold_percent"] == 10


def test_whole_gpus_and_mig_slices_keep_the_pools_threshold() -> None:
    whole = PodSpec("w", cpu_milli=0, memory_mib=0, gpu_count=2, gpu_milli=1000)
    mig = PodSpec("m", cpu_milli=0, memory_mib=0, mig_profile="1g.10gb")
    assert compute_fraction(whole) == compute_fraction(mig) == 1.0
    assert LIMITS.activity_for(1.0) == LIMITS.activity


def test_agent_last_active_covers_lost_history() -> None:
    # one sample after a controller restart, but the agent saw no SM use for 20 min
    assert idle_since(_history(UsagePoint(1200, 0)), last_active=0.0) == 0.0
    # SM above zero (but under threshold) now: the agent's time says nothing
    assert idle_since(_history(UsagePoint(1200, 5)), last_active=0.0) == 1200
    # never idle since before the allocation
    assert idle_since(_history(UsagePoint(1200, 0)), last_active=0.0, allocated_at=900) == 900
    # once an active sample was seen, the samples say since when: lastActive adds nothing
    seen = _history(UsagePoint(600, 50), UsagePoint(1200, 0))
    assert idle_since(seen, last_active=0.0) == 1200


def test_history_keeps_the_longest_resumed_quiet_run_and_ignores_stale_samples() -> None:
    points = [UsagePoint(0, 50)]
    points += [UsagePoint(t, 0) for t in range(60, 960, 60)]  # quiet from 60 to 900
    points += [UsagePoint(960, 50), UsagePoint(1020, 0), UsagePoint(1080, 60)]
    history = _history(*points)
    assert history.longest_quiet == 900  # first quiet sample to the active one
    assert history.quiet_since is None
    assert history.observe(UsagePoint(500, 0), LIMITS.activity) is history  # older: ignored
    quiet = history.observe(UsagePoint(1140, 0), LIMITS.activity)
    assert (quiet.quiet_since, quiet.longest_quiet) == (1140, 900)  # not over: not counted


@pytest.mark.parametrize(
    ("longest", "expected"),
    [
        (0, 600),  # never paused: the pool's period
        (200, 600),  # a short pause does not shorten it
        (500, 1000),  # twice the longest resumed quiet phase
        (1200, 1800),  # capped at three times the pool's
    ],
)
def test_idle_period_learned_from_resumed_quiet_phases(longest: float, expected: float) -> None:
    history = UsageHistory(UsagePoint(0, 50), None, True, longest)
    assert idle_period(history, LIMITS) == expected
    off = Limits(idle_threshold_percent=10, idle_period=600, quiet_history_factor=0)
    assert idle_period(history, off) == 600


def test_pod_that_resumed_after_a_long_pause_is_warned_later() -> None:
    """A 12-minute checkpoint came and went: the next 12-minute silence is not abandonment."""
    before = [UsagePoint(0, 50, 1000), *_idle_usage(60, 780, sm=0), UsagePoint(840, 50, 1000)]
    pause = _idle_usage(900, 900 + 720, sm=0)
    pod = _pod(usage=(*before, *pause))
    assert pod.usage.longest_quiet == 780
    assert decide(pod, LIMITS, CLEANUP, 900 + 720) is None  # 12 min < 2 x 13 min
    fresh = _pod(usage=(UsagePoint(840, 50, 1000), *pause))
    assert isinstance(decide(fresh, LIMITS, CLEANUP, 900 + 720), Warn)  # no such history
    warn = decide(pod, LIMITS, CLEANUP, 900 + 1560)
    assert isinstance(warn, Warn)
    assert warn.values["idle_period"] == 1560
    assert warn.values["longest_quiet_seconds"] == 780


@pytest.mark.parametrize(
    ("longest", "quiet_age", "expected"),
    [
        (0, 7200, 600),  # never resumed: the pool's period, however old the pod
        (120, None, 600),  # age unknown (no trusted start): the longest pause only
        (120, 1000, 600),  # young: 0.4 x 1000 s is under the pool's period
        (120, 2000, 800),  # 0.4 x its age when the quiet phase began
        (500, 2000, 1000),  # twice the longest pause, when that is more
        (120, 7200, 1800),  # capped at three times the pool's
    ],
)
def test_idle_period_grows_with_the_age_of_a_pod_that_resumed(
    longest: float, quiet_age: float | None, expected: float
) -> None:
    history = UsageHistory(UsagePoint(0, 50), None, True, longest)
    assert idle_period(history, LIMITS, quiet_age) == expected
    off = replace(LIMITS, quiet_age_fraction=0)
    assert idle_period(history, off, quiet_age) == max(600, min(2 * longest, 1800))


UNLIMITED = replace(LIMITS, max_share_duration=None)
"""The pool's limits without a share-duration limit: long-lived pods, judged by the idle rule."""


def _endpoint(gap_after: float, gap: float) -> tuple[UsagePoint, ...]:
    """An inference endpoint: a 5-minute gap between its first bursts, busy until
    ``gap_after``, then silent (0 % SM, its model resident, nothing moving) for ``gap``."""
    points = [UsagePoint(0, 40, 1000), *_idle_usage(60, 300, sm=0)]
    points += _idle_usage(360, gap_after, sm=40)
    return (*points, *_idle_usage(gap_after + 60, gap_after + gap, sm=0))


def test_an_endpoint_whose_gaps_grew_is_not_reclaimed_in_a_gap_longer_than_its_longest() -> None:
    """Issue 30: gaps of 5 minutes after its launch, 20 minutes two hours later."""
    pod = _pod(usage=_endpoint(7200, 1200))
    assert pod.usage.longest_quiet == 300
    assert decide(pod, UNLIMITED, CLEANUP, 7200 + 1200) is None
    # the longest pause alone gives it 10 minutes: warned, then reclaimed, while it still serves
    longest_only = replace(UNLIMITED, quiet_age_fraction=0)
    assert isinstance(decide(pod, longest_only, CLEANUP, 7200 + 1200), Warn)
    # the requests come back: nothing to clear, nothing was warned
    back = _pod(usage=(*_endpoint(7200, 1200), UsagePoint(8460, 40, 1000)))
    assert back.usage.longest_quiet == 8460 - 7260
    assert decide(back, UNLIMITED, CLEANUP, 8460) is None


def test_an_endpoint_silent_past_the_cap_is_reclaimed_after_the_grace() -> None:
    """Its age buys it at most three times the pool's period: abandoned, it is given back."""
    pod = _pod(usage=_endpoint(7200, 1860))
    warn = decide(pod, UNLIMITED, CLEANUP, 7260 + 1800)
    assert isinstance(warn, Warn)
    assert warn.values["idle_period"] == 1800
    assert warn.values["share_age_at_quiet_seconds"] == 7260
    warned = replace(pod, warning=PodWarning(Rule.IDLE, 7260 + 1800))
    assert isinstance(decide(warned, UNLIMITED, CLEANUP, 7260 + 1800 + 120), Reclaim)


def test_an_old_pod_that_never_paused_is_warned_after_the_pools_period() -> None:
    """Age alone says nothing: a job that worked two hours and stopped is idle after 10 min."""
    pod = _pod(usage=(*_idle_usage(0, 7200, sm=80), *_idle_usage(7260, 7260 + 600, sm=0)))
    assert pod.usage.longest_quiet == 0
    warn = decide(pod, UNLIMITED, CLEANUP, 7260 + 600)
    assert isinstance(warn, Warn)
    assert warn.values["idle_period"] == 600


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
        ({"memory_busy_percent": 0}, "memoryBusyPercent"),
        ({"memory_busy_percent": 101}, "memoryBusyPercent"),
        ({"quiet_history_factor": -1}, "quietHistoryFactor"),
        ({"quiet_age_fraction": -0.1}, "quietAgeFraction"),
        ({"quiet_age_fraction": float("nan")}, "quietAgeFraction"),
        ({"quiet_history_cap": 0.5}, "quietHistoryCap"),
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
    pod = _pod(usage=usage, warning=warning, last_active=0.0)
    decision = decide(pod, limits, CLEANUP, now)
    assert not isinstance(decision, Warn | Reclaim)


BUSY = (UsagePoint(0, 90),)  # active, so no idle rule interferes


def test_a_declared_runtime_is_a_limit_warned_at_the_runtime_and_reclaimed_after_grace() -> None:
    declared = _pod(usage=BUSY, declared_runtime=600.0)
    assert decide(declared, LIMITS, CLEANUP, 599) is None
    warn = decide(declared, LIMITS, CLEANUP, 600)
    assert isinstance(warn, Warn)
    assert warn.rule is Rule.DECLARED_RUNTIME
    assert warn.values == {"held_seconds": 600, "expected_runtime": 600, "grace": 120}
    warned = replace(declared, warning=PodWarning(Rule.DECLARED_RUNTIME, 600))
    assert decide(warned, LIMITS, CLEANUP, 719) is None  # within the pool's reclaimGrace
    reclaim = decide(warned, LIMITS, CLEANUP, 720)
    assert isinstance(reclaim, Reclaim)
    assert reclaim.rule is Rule.DECLARED_RUNTIME
    assert reclaim.values["warned_seconds"] == 120
    assert "rule declared-runtime" in reclaim.message


def test_an_undeclared_pod_is_held_only_to_the_pools_limits() -> None:
    undeclared = _pod(usage=BUSY)
    assert decide(undeclared, LIMITS, CLEANUP, 7199) is None
    late = decide(undeclared, LIMITS, CLEANUP, 7200)
    assert isinstance(late, Warn)
    assert late.rule is Rule.MAX_SHARE_DURATION


def test_the_shorter_time_limit_fires_and_an_exempt_class_keeps_its_declared_runtime() -> None:
    long_declared = _pod(usage=BUSY, declared_runtime=9000.0)
    first = decide(long_declared, LIMITS, CLEANUP, 7200)
    assert isinstance(first, Warn)
    assert first.rule is Rule.MAX_SHARE_DURATION  # the pool's limit is the shorter
    # once warned under the shorter limit, passing the other one does not re-warn
    warned = replace(long_declared, warning=PodWarning(Rule.MAX_SHARE_DURATION, 7200))
    assert isinstance(decide(warned, LIMITS, CLEANUP, 9100), Reclaim)
    exempt = Limits(grace=120, max_share_duration=60, exempt_classes=frozenset({"serving"}))
    serving = _pod(usage=BUSY, pod_class="serving", declared_runtime=600.0)
    assert decide(serving, exempt, CLEANUP, 599) is None  # exempt from maxShareDuration
    promised = decide(serving, exempt, CLEANUP, 600)
    assert isinstance(promised, Warn)
    assert promised.rule is Rule.DECLARED_RUNTIME  # but not from its own promise


def test_a_declared_runtime_counts_only_for_a_running_pod_with_a_trusted_start() -> None:
    assert decide(_pod(declared_runtime=60.0, phase="Succeeded"), LIMITS, CLEANUP, 1000) is None
    untrusted = _pod(declared_runtime=60.0, allocated_at=None, usage=BUSY)
    assert decide(untrusted, LIMITS, CLEANUP, 1000) is None


def test_a_pod_bound_without_a_trusted_record_is_cleaned_up_after_the_timeout() -> None:
    bypassed = _pod(allocated_at=None, unplaced_since=1000.0, usage=BUSY)
    assert decide(bypassed, LIMITS, CLEANUP, 1299) is None
    cleanup = decide(bypassed, LIMITS, CLEANUP, 1300)
    assert isinstance(cleanup, Cleanup)
    assert cleanup.rule is Rule.NOT_RUNNING
    assert cleanup.values == {
        "bound_seconds": 300,
        "timeout": 300,
        "why": "bound without a trusted allocation record",
    }
    pending = replace(bypassed, phase="Pending")
    assert isinstance(decide(pending, LIMITS, CLEANUP, 1300), Cleanup)
    # a finished one holds nothing; one being deleted is on its way out
    assert decide(replace(bypassed, phase="Failed"), LIMITS, CLEANUP, 5000) is None
    assert decide(replace(bypassed, deleting=True), LIMITS, CLEANUP, 5000) is None
