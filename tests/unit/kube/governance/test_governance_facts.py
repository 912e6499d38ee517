"""Reading governance's inputs from Kubernetes objects: usage, settings, warnings, restarts."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gpupool.agent.telemetry import PodGpuUsage, UsageTracker
from gpupool.governance.decisions import Rule, Warn
from gpupool.governance.rules import CleanupLimits, PodFacts, PodWarning, decide
from gpupool.governance.usage import UsageHistory, UsagePoint
from gpupool.kube.governance.facts import (
    PodUsage,
    format_warning,
    node_usage,
    not_ready_since,
    parse_warning,
    pod_restarts,
    read_settings,
    stored_sample,
)
from gpupool.kube.governance.ledger import finished_at
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.timestamps import parse_time
from gpupool.kube.objects.usage_signal import UsageSignalError, decode_usage, encode_usage
from gpupool.kube.objects.vocabulary import LABEL_CLASS


def _node(annotations: dict[str, str] | None = None, ready: str = "True") -> NodeRecord:
    raw = {
        "metadata": {"name": "n1", "annotations": annotations or {}, "labels": {"pool": "a"}},
        "status": {
            "conditions": [
                {"type": "Ready", "status": ready, "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]
        },
    }
    return msgspec.convert(raw, NodeRecord)


def test_usage_annotation_read_as_the_agent_writes_it() -> None:
    text = json.dumps(
        {
            "sampledAt": "2026-01-01T00:01:00Z",
            "pods": {
                "u1": {"smPercent": 7, "memoryMib": 512, "lastActive": "2026-01-01T00:00:00Z"}
            },
        }
    )
    published = node_usage(_node({"gpupool.io/gpu-usage": text}))
    assert published is not None
    assert published.sampled_at == parse_time("2026-01-01T00:01:00Z")
    assert published.period == 60.0  # an agent that does not say has the default period
    usage = published.pods
    assert usage["u1"].sm_percent == 7
    assert usage["u1"].memory_mib == 512
    assert usage["u1"].sampled_at == parse_time("2026-01-01T00:01:00Z")
    assert usage["u1"].last_active == parse_time("2026-01-01T00:00:00Z")
    assert usage["u1"].memory_busy_percent == 0  # an agent older than the field: none


def test_what_the_agent_writes_is_what_the_controller_reads() -> None:
    """One definition of the signal's fields: the tracker's output decodes field for field."""
    tracker = UsageTracker()
    samples = [PodGpuUsage("u1", "GPU-0", 700, 0, 35), PodGpuUsage("u1", "GPU-1", 300, 20, 5)]
    tracker.update({"u1", "u2"}, samples, now=1_767_225_600.0)
    tracker.update({"u1", "u2"}, [PodGpuUsage("u1", "GPU-0", 1000, 0, 0)], now=1_767_225_605.0)
    published = node_usage(_node({"gpupool.io/gpu-usage": encode_usage(tracker.signal(30.0))}))
    assert published is not None
    assert published.period == 30.0
    one, two = published.pods["u1"], published.pods["u2"]
    assert (one.sm_percent, one.memory_busy_percent, one.memory_mib) == (20, 35, 1000)
    assert (one.sampled_at, one.last_active) == (1_767_225_605.0, 1_767_225_600.0)
    assert (two.sm_percent, two.memory_busy_percent, two.memory_mib) == (0, 0, 0)


def test_usage_annotation_says_its_publication_period() -> None:
    text = json.dumps({"sampledAt": "2026-01-01T00:01:00Z", "periodSeconds": 15, "pods": {}})
    published = node_usage(_node({"gpupool.io/gpu-usage": text}))
    assert published is not None
    assert (published.period, published.pods) == (15.0, {})


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"pods": {}}),
        json.dumps({"sampledAt": "yesterday", "pods": {}}),
        json.dumps({"sampledAt": "2026-01-01T00:00:00Z", "pods": {"u": {"smPercent": -1}}}),
        json.dumps({"sampledAt": "2026-01-01T00:00:00Z", "pods": {"u": {"smPercent": "x"}}}),
        json.dumps({"sampledAt": "2026-01-01T00:00:00Z", "pods": []}),
        json.dumps({"sampledAt": "2026-01-01T00:00:00Z", "periodSeconds": "often", "pods": {}}),
        json.dumps(
            {"sampledAt": "2026-01-01T00:00:00Z", "pods": {"u": {"smPercent": 1, "memoryMib": -5}}}
        ),
        json.dumps(
            {
                "sampledAt": "2026-01-01T00:00:00Z",
                "pods": {"u": {"smPercent": 1, "memoryBusyPercent": 1e9}},
            }
        ),
    ],
)
def test_unreadable_usage_is_no_usage_never_a_crash(text: str) -> None:
    assert node_usage(_node({"gpupool.io/gpu-usage": text})) is None


def test_a_bad_usage_signal_names_the_field() -> None:
    bad = {
        "sampledAt": "2026-01-01T00:00:00Z",
        "pods": {"u": {"smPercent": 1, "memoryBusyPercent": -1}},
    }
    with pytest.raises(UsageSignalError, match=r"memoryBusyPercent"):
        decode_usage(json.dumps(bad))
    with pytest.raises(UsageSignalError, match=r"sampledAt"):
        decode_usage(json.dumps({"pods": {}}))


def test_node_not_ready_since_its_transition() -> None:
    assert not_ready_since(_node()) is None
    assert not_ready_since(_node(ready="False")) == parse_time("2026-01-01T00:00:00Z")
    assert not_ready_since(None) is None


def test_warning_round_trip_and_garbage() -> None:
    warning = PodWarning(Rule.IDLE, 1767225600.0)
    assert parse_warning(format_warning(warning)) == warning
    for text in (None, "", "idle", "nosuchrule@2026-01-01T00:00:00Z", "idle@soon"):
        assert parse_warning(text) is None


def _pod(namespace: str, queue: str = "", labels: dict[str, str] | None = None) -> PodRecord:
    labels = {**({"gpupool.io/queue": queue} if queue else {}), **(labels or {})}
    raw = {"metadata": {"name": "p", "namespace": namespace, "labels": labels}}
    return msgspec.convert(raw, PodRecord)


def test_limits_come_from_the_shared_parser_and_a_bad_pool_is_left_out() -> None:
    governance = {
        "idleThreshold": {"gpuUtilPercent": 5},
        "idleGrace": "30m",
        "reclaimGrace": "2m",
        "maxShareDuration": "8h",
        "exemptClasses": ["serving"],
    }
    pools = [
        {"metadata": {"name": "a"}, "spec": {"mode": "Shared", "nodeSelector": {"pool": "a"},
                                             "governance": governance}},
        {"metadata": {"name": "bad"}, "spec": {"mode": "Shared",
                                               "governance": {"idleGrace": "soon"}}},
    ]  # fmt: skip
    queues = [{"metadata": {"name": "q"}, "spec": {"namespaces": ["ns"], "maxShareDuration": "1h"}}]
    settings = read_settings(pools, queues)
    pool = settings.pool_of(_node())
    assert pool is not None
    assert pool.name == "a"  # "bad" selects every node but was left out, as the scheduler does
    limits = settings.limits_for(pool, _pod("other"))
    assert (limits.idle_threshold_percent, limits.idle_period, limits.grace) == (5, 1800, 120)
    assert (limits.max_share_duration, limits.exempt_classes) == (8 * 3600, set())
    assert settings.limits_for(pool, _pod("ns")).max_share_duration == 3600  # the queue's
    assert settings.limits_for(None, _pod("other")).idle_threshold_percent is None


def test_an_exempt_class_is_held_to_the_limits_unless_its_queue_lists_the_class() -> None:
    """``exemptClasses`` exempt only the classes the pod's queue lists in ``allowedClasses``.

    A queue that restricts no class lets its tenants write any class label, ``serving``
    included: the pool's exemption must not be theirs for the asking.
    """
    governance = {
        "idleThreshold": {"gpuUtilPercent": 5},
        "idleGrace": "30m",
        "exemptClasses": ["serving"],
    }
    spec = {"mode": "Shared", "nodeSelector": {"pool": "a"}, "governance": governance}
    pools = [{"metadata": {"name": "a"}, "spec": spec}]
    queues = [
        {"metadata": {"name": "open"}, "spec": {"namespaces": ["open"]}},
        {"metadata": {"name": "lists"}, "spec": {"namespaces": ["lists"],
                                                 "allowedClasses": ["serving", "batch"]}},
    ]  # fmt: skip
    settings = read_settings(pools, queues)
    pool = settings.pool_of(_node())
    assert pool is not None
    assert pool.name == "a"
    now = 6000.0  # idle (0 % SM) past the default idle period, however long it learns it
    for namespace, exempt in (("open", False), ("lists", True), ("nowhere", False)):
        pod = _pod(namespace, labels={LABEL_CLASS: "serving"})
        assert settings.class_of(pod) == "serving"  # the class itself is allowed everywhere
        limits = settings.limits_for(pool, pod)
        idle = UsageHistory.of((UsagePoint(0.0, 0.0), UsagePoint(now, 0.0)), limits.activity)
        facts = PodFacts(
            uid="u", pod_class="serving", allocated_at=0.0, phase="Running", usage=idle
        )
        decision = decide(facts, limits, CleanupLimits(), now)
        assert (decision is None) is exempt, (namespace, decision)
        if not exempt:
            assert isinstance(decision, Warn)
            assert decision.rule is Rule.IDLE


def test_the_queue_is_the_schedulers_rule_a_label_counts_only_where_it_serves() -> None:
    queues = [
        {"metadata": {"name": name}, "spec": {"namespaces": ["shared"]}} for name in ("b", "a")
    ]
    settings = read_settings([], queues)
    assert settings.queue_of(_pod("shared")) == "a"  # first by name
    assert settings.queue_of(_pod("shared", "b")) == "b"
    assert settings.queue_of(_pod("alone", "b")) == "default"  # a forged label is ignored


def test_a_class_its_queue_does_not_allow_buys_governance_nothing() -> None:
    """An exempt class its queue may not use counts as no class, hence no exemption."""
    spec = {"namespaces": ["ml"], "allowedClasses": ["training"]}
    settings = read_settings([], [{"metadata": {"name": "train"}, "spec": spec}])
    raw: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ml"}}
    for label, counted in (("serving", ""), ("training", "training")):
        raw["metadata"]["labels"] = {"gpupool.io/class": label}
        assert settings.class_of(msgspec.convert(raw, PodRecord)) == counted


def test_restarts_and_crash_loop_reason() -> None:
    pod = msgspec.convert(
        {
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "a", "restartCount": 2, "state": {"running": {}}},
                    {
                        "name": "b",
                        "restartCount": 7,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    },
                ],
            }
        },
        PodRecord,
    )
    assert pod_restarts(pod) == (7, "CrashLoopBackOff")
    assert pod_restarts(msgspec.convert({}, PodRecord)) == (0, "")


def test_a_usage_sample_is_stored_as_the_agent_sent_it_and_a_bad_one_not_at_all() -> None:
    sampled = parse_time("2026-01-01T00:01:00Z")
    assert sampled is not None
    (stored,) = stored_sample("u1", PodUsage(sampled, 42.0, 2048.0, None))
    assert stored.pod_uid == "u1"
    assert stored.time.timestamp() == sampled
    assert (stored.sm_percent, stored.memory_used_gib) == (42.0, 2.0)
    assert stored_sample("u1", PodUsage(sampled, -5.0, 2048.0, None)) == []  # refused, logged


def test_a_finished_pods_end_is_its_last_containers_finish() -> None:
    def status(phase: str, *finished: str) -> dict[str, object]:
        containers = [{"state": {"terminated": {"finishedAt": when}}} for when in finished]
        return {"status": {"phase": phase, "containerStatuses": containers}}

    ended = status("Succeeded", "2026-01-01T00:05:00Z", "2026-01-01T00:07:00Z")
    assert finished_at(ended) == parse_time("2026-01-01T00:07:00Z")
    assert finished_at(status("Running", "2026-01-01T00:05:00Z")) is None  # not finished
    assert finished_at(status("Failed")) is None  # finished, but no container says when
    assert finished_at({}) is None
