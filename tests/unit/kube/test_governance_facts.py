"""Reading governance's inputs from Kubernetes objects: usage, settings, warnings, restarts."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gpupool.governance.decisions import Rule
from gpupool.governance.rules import GovernanceSettingsError, PodWarning
from gpupool.kube.governance_facts import (
    format_warning,
    node_usage,
    not_ready_since,
    parse_time,
    parse_warning,
    pod_restarts,
    pool_limits,
    read_settings,
)
from gpupool.kube.records import NodeRecord, PodRecord


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
    usage = node_usage(_node({"gpupool.io/gpu-usage": text}))
    assert usage["u1"].sm_percent == 7
    assert usage["u1"].memory_mib == 512
    assert usage["u1"].sampled_at == parse_time("2026-01-01T00:01:00Z")
    assert usage["u1"].last_active == parse_time("2026-01-01T00:00:00Z")


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"pods": {}}),
        json.dumps({"sampledAt": "yesterday", "pods": {}}),
        json.dumps({"sampledAt": "2026-01-01T00:00:00Z", "pods": {"u": {"smPercent": -1}}}),
        json.dumps({"sampledAt": "2026-01-01T00:00:00Z", "pods": {"u": {"smPercent": "x"}}}),
        json.dumps({"sampledAt": "2026-01-01T00:00:00Z", "pods": []}),
    ],
)
def test_unreadable_usage_is_no_usage_never_a_crash(text: str) -> None:
    assert node_usage(_node({"gpupool.io/gpu-usage": text})) == {}


def test_node_not_ready_since_its_transition() -> None:
    assert not_ready_since(_node()) is None
    assert not_ready_since(_node(ready="False")) == parse_time("2026-01-01T00:00:00Z")
    assert not_ready_since(None) is None


def test_warning_round_trip_and_garbage() -> None:
    warning = PodWarning(Rule.IDLE, 1767225600.0)
    assert parse_warning(format_warning(warning)) == warning
    for text in (None, "", "idle", "nosuchrule@2026-01-01T00:00:00Z", "idle@soon"):
        assert parse_warning(text) is None


def test_pool_limits_from_the_crd_fields() -> None:
    limits = pool_limits(
        {
            "governance": {
                "idleThreshold": {"gpuUtilPercent": 5},
                "idleGrace": "30m",
                "reclaimGrace": "2m",
                "maxShareDuration": "8h",
                "exemptClasses": ["serving"],
            }
        }
    )
    assert limits.idle_threshold_percent == 5
    assert limits.idle_period == 1800
    assert limits.grace == 120
    assert limits.max_share_duration == 8 * 3600
    assert limits.exempt_classes == frozenset({"serving"})
    assert pool_limits({}).idle_threshold_percent is None  # no governance block: idle rule off


@pytest.mark.parametrize(
    ("governance", "field"),
    [
        ({"idleGrace": "30 minutes"}, "spec.governance.idleGrace"),
        ({"idleThreshold": {"gpuUtilPercent": "low"}}, "idleThreshold.gpuUtilPercent"),
        ({"exemptClasses": "serving"}, "spec.governance.exemptClasses"),
        ({"idleThreshold": {"gpuUtilPercent": 150}}, "idleThreshold.gpuUtilPercent"),
    ],
)
def test_bad_pool_settings_name_the_field(governance: dict[str, Any], field: str) -> None:
    with pytest.raises(GovernanceSettingsError, match=field):
        pool_limits({"governance": governance})


def test_settings_bad_pool_left_out_queue_limit_applies() -> None:
    pools = [
        {"metadata": {"name": "a"}, "spec": {"nodeSelector": {"pool": "a"}, "governance": {}}},
        {"metadata": {"name": "bad"}, "spec": {"governance": {"idleGrace": "soon"}}},
    ]
    queues = [{"metadata": {"name": "q"}, "spec": {"namespaces": ["ns"], "maxShareDuration": "1h"}}]
    settings = read_settings(pools, queues)
    pool = settings.pool_of(_node())
    assert pool is not None
    assert pool.name == "a"  # "bad" selects every node but was left out
    assert settings.limits_for(pool, "ns").max_share_duration == 3600
    assert settings.limits_for(pool, "other").max_share_duration is None


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
