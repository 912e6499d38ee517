"""Stale usage counts as neither idle nor active (gpupool.governance.freshness)."""

from __future__ import annotations

import math

import pytest

from gpupool.governance.decisions import Cleanup, ClearWarning, Reclaim, Rule, Warn
from gpupool.governance.freshness import (
    DEFAULT_PUBLICATION_PERIOD,
    LONGEST_PUBLICATION_PERIOD,
    STALE_AFTER_PERIODS,
    decide_on_fresh_usage,
    is_stale,
    stale_after,
)
from gpupool.governance.rules import (
    CleanupLimits,
    Limits,
    PodFacts,
    PodWarning,
    decide,
)
from gpupool.governance.usage import UsageHistory, UsagePoint

LIMITS = Limits(idle_threshold_percent=10, idle_period=600, grace=120, max_share_duration=7200)
CLEANUP = CleanupLimits(crash_loop_restarts=3, not_running_timeout=300, node_not_ready_timeout=60)
PERIOD = 60.0


def idle_until(end: float) -> UsageHistory:
    points = (UsagePoint(float(t), 2.0, 1000.0) for t in range(0, int(end) + 1, 60))
    return UsageHistory.of(points, LIMITS.activity)


@pytest.mark.parametrize(
    ("sampled_at", "period", "now", "stale"),
    [
        (None, PERIOD, 1e9, False),  # nothing published yet: nothing to be stale
        (1000.0, PERIOD, 1000.0 + 3 * PERIOD, False),  # exactly three periods: still counts
        (1000.0, PERIOD, 1000.0 + 3 * PERIOD + 1, True),
        (1000.0, 10.0, 1031.0, True),  # an agent that publishes often goes stale sooner
        (0.0, 1e9, 3 * LONGEST_PUBLICATION_PERIOD + 1, True),  # no node buys an endless period
        (0.0, math.nan, 3 * DEFAULT_PUBLICATION_PERIOD + 1, True),
        (0.0, -5.0, 3 * DEFAULT_PUBLICATION_PERIOD, False),
    ],
)
def test_one_definition_of_stale(
    sampled_at: float | None, period: float, now: float, stale: bool
) -> None:
    assert is_stale(sampled_at, period, now) is stale
    assert stale_after(PERIOD) == STALE_AFTER_PERIODS * PERIOD


def test_an_idle_pod_is_warned_on_fresh_samples_only() -> None:
    pod = PodFacts(uid="u", allocated_at=0.0, usage=idle_until(660))
    assert isinstance(decide_on_fresh_usage(pod, LIMITS, CLEANUP, 700, PERIOD), Warn)
    assert decide_on_fresh_usage(pod, LIMITS, CLEANUP, 660 + 181, PERIOD) is None


def test_a_warned_pod_is_neither_reclaimed_nor_cleared_while_its_agent_is_silent() -> None:
    warned = PodFacts(
        uid="u", allocated_at=0.0, usage=idle_until(660), warning=PodWarning(Rule.IDLE, 660)
    )
    assert isinstance(decide_on_fresh_usage(warned, LIMITS, CLEANUP, 800, PERIOD), Reclaim)
    assert decide_on_fresh_usage(warned, LIMITS, CLEANUP, 900, PERIOD) is None  # not cleared
    # the plain rule on the same facts: a silent agent's idle pod reclaimed on its last word
    assert isinstance(decide(warned, LIMITS, CLEANUP, 900), Reclaim)


def test_rules_that_read_no_usage_still_apply_on_stale_usage() -> None:
    crashing = PodFacts(
        uid="u",
        allocated_at=0.0,
        usage=idle_until(60),
        restarts=5,
        waiting_reason="CrashLoopBackOff",
    )
    assert isinstance(decide_on_fresh_usage(crashing, LIMITS, CLEANUP, 5000, PERIOD), Cleanup)
    long = PodFacts(uid="u", allocated_at=0.0, usage=idle_until(60))
    decision = decide_on_fresh_usage(long, LIMITS, CLEANUP, 7300, PERIOD)
    assert isinstance(decision, Warn)
    assert decision.rule is Rule.MAX_SHARE_DURATION


def test_a_duration_warning_is_cleared_as_ever_on_stale_usage() -> None:
    warned = PodFacts(
        uid="u",
        allocated_at=0.0,
        usage=idle_until(60),
        warning=PodWarning(Rule.MAX_SHARE_DURATION, 100),
    )
    decision = decide_on_fresh_usage(warned, LIMITS, CLEANUP, 1000, PERIOD)
    assert isinstance(decision, ClearWarning)
