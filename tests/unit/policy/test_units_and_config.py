"""GPU units and the pools-and-queues file: values, and errors that name the field."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.core.model import PodSpec
from gpupool.policy.config import parse_policy
from gpupool.policy.membership import pod_class, pod_queue
from gpupool.policy.spec import ConsolidationMode, ConsolidationSpec, PoolMode
from gpupool.policy.spec_reader import PolicyConfigError, parse_duration
from gpupool.policy.units import format_units, milli_units

from .builders import mig, share, whole


@pytest.mark.parametrize(
    ("pod", "gpu_memory", "expected"),
    [
        pytest.param(PodSpec("cpu", 1000, 1), 40_960, 0, id="cpu-only"),
        pytest.param(whole("w", 2), 40_960, 2000, id="two-whole"),
        pytest.param(share("s", 250), 40_960, 250, id="compute-share"),
        pytest.param(share("s", 200, 24_576), 40_960, 600, id="memory-dominates"),
        pytest.param(share("s", 700, 4096), 40_960, 700, id="compute-dominates"),
        pytest.param(share("s", 100, 4096), 0, 1000, id="memory-on-unknown-gpu-counts-whole"),
        pytest.param(mig("m", "3g.40gb"), 81_920, 429, id="mig-3g"),
        pytest.param(mig("m", "1g.10gb"), 81_920, 143, id="mig-1g"),
        pytest.param(mig("m", "1g.10gb+me"), 81_920, 143, id="mig-1g-with-attribute"),
        pytest.param(mig("m", "odd"), 81_920, 1000, id="mig-unknown-profile"),
    ],
)
def test_gpu_units(pod: PodSpec, gpu_memory: int, expected: int) -> None:
    assert milli_units(pod, gpu_memory) == expected


def test_units_format_as_the_reasons_say_them() -> None:
    assert (format_units(12_000), format_units(2500)) == ("12", "2.5")


@pytest.mark.parametrize(
    ("text", "seconds"), [("30m", 1800.0), ("2h", 7200.0), ("1h30m", 5400.0), ("45s", 45.0)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30 minutes", "1d", "m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def pool_doc(name: str = "a", **spec: Any) -> dict[str, Any]:
    return {"kind": "GPUPool", "metadata": {"name": name}, "spec": {"mode": "Shared", **spec}}


def queue_doc(name: str = "q", **spec: Any) -> dict[str, Any]:
    return {
        "kind": "GPUQueue",
        "metadata": {"name": name},
        "spec": {"namespaces": [name], **spec},
    }


def test_a_full_config_parses_with_crd_defaults() -> None:
    config = parse_policy(
        [
            pool_doc("a100-shared", nodeSelector={"gpupool.io/gpu-model": "A100"},
                     shared={"maxPodsPerGPU": 8, "memoryOvercommit": 1.5},
                     allowedClasses=["inference", "dev"],
                     governance={"idleThreshold": {"gpuUtilPercent": 5}, "idleGrace": "30m",
                                 "maxShareDuration": "8h", "exemptClasses": ["inference"]}),
            pool_doc("plain", disruptionBudgetWait="45s", maxEvictionGracePeriodSeconds=10),
            {"kind": "GPUPool", "metadata": {"name": "x"}, "spec": {"mode": "Exclusive"}},
            queue_doc("research", priority=100, weight=2, maxConcurrentPods=50,
                      quotas=[{"pool": "a100-shared", "guaranteed": 4, "ceiling": 12}],
                      minRuntimeBeforePreemption="10m", reclaimable=False,
                      maxShareDuration="2h"),
        ]
    )  # fmt: skip
    shared, plain, exclusive = config.pools
    assert shared.mode is PoolMode.SHARED
    assert shared.node_selector == (("gpupool.io/gpu-model", "A100"),)
    assert (shared.max_pods_per_gpu, shared.memory_overcommit) == (8, 1.5)
    assert shared.allowed_classes == {"inference", "dev"}
    assert (plain.max_pods_per_gpu, plain.compute_overcommit) == (4, 1.0)  # CRD defaults
    assert exclusive.max_pods_per_gpu is None
    governed = shared.governance
    assert (governed.idle_threshold_percent, governed.idle_period) == (5.0, 1800.0)
    assert (governed.max_share_duration, governed.grace) == (8 * 3600.0, 300.0)
    assert governed.exempt_classes == {"inference"}
    assert plain.governance.idle_threshold_percent is None  # no idle reclaim unless asked
    assert (plain.eviction.budget_wait, plain.eviction.max_grace) == (45.0, 10)
    assert (shared.eviction.budget_wait, shared.eviction.max_grace) == (300.0, 30)  # defaults
    (research,) = config.queues
    assert research.max_share_duration == 7200.0
    assert (research.priority, research.weight, research.max_concurrent_pods) == (100, 2.0, 50)
    assert research.quota("a100-shared") is not None
    assert (research.quotas[0].guaranteed, research.quotas[0].ceiling) == (4000, 12_000)
    assert research.min_runtime_before_preemption == 600.0
    assert research.reclaimable is False


def test_a_namespace_two_queues_serve_is_allowed_and_the_rule_picks_the_queue() -> None:
    config = parse_policy(
        [queue_doc("b", namespaces=["team"]), queue_doc("a", namespaces=["team"])]
    )
    assert [pod_queue(config.queues, "team", label) for label in ("", "b", "a", "x")] == [
        "a",  # no label: the first serving queue by name
        "b",  # a label naming a serving queue
        "a",
        "a",  # a label naming no serving queue is ignored
    ]
    assert pod_queue(config.queues, "elsewhere", "a") == "default"  # no tenant charges "a"


def test_a_class_counts_only_where_the_pods_own_queue_allows_it() -> None:
    config = parse_policy(
        [
            queue_doc("gold", namespaces=["team"], allowedClasses=["training"]),
            queue_doc("open", namespaces=["team"]),
        ]
    )
    assert config.queues[0].allowed_classes == frozenset({"training"})
    cases = [
        ("gold", "training", "training"),  # allowed by its queue
        ("gold", "serving", ""),  # not allowed: counts as no class
        ("open", "serving", "serving"),  # empty allowedClasses: every class
        ("", "serving", ""),  # no label: its queue is "gold" (first by name)
        ("gold", "", ""),  # no class is always allowed
    ]
    for queue, label, counted in cases:
        assert pod_class(config.queues, "team", queue, label) == counted, (queue, label)
    assert pod_class(config.queues, "elsewhere", "gold", "serving") == "serving"  # default queue


@pytest.mark.parametrize(
    ("documents", "message"),
    [
        ([pool_doc(mode="Fractional")], "GPUPool a: spec.mode: must be one of"),
        ([{"kind": "GPUPool", "metadata": {"name": "a"}, "spec": {}}], "spec.mode"),
        ([pool_doc(shared={"maxPodsPerGPU": 0})], "spec.shared.maxPodsPerGPU: must be 1..64"),
        ([pool_doc(shared={"memoryOvercommit": 5})], "spec.shared.memoryOvercommit: must be"),
        (
            [{"kind": "GPUPool", "metadata": {"name": "a"},
              "spec": {"mode": "Exclusive", "shared": {}}}],
            "spec.shared: only allowed when spec.mode is Shared",
        ),
        ([pool_doc(nodeSelector={"k": 3})], "spec.nodeSelector.k: must be a string"),
        ([pool_doc(allowedClasses="dev")], "spec.allowedClasses: must be a list"),
        ([queue_doc(allowedClasses="dev")], "GPUQueue q: spec.allowedClasses: must be a list"),
        ([pool_doc("default")], "'default' is the implicit pool"),
        ([pool_doc(), pool_doc()], "GPUPool a: metadata.name: defined twice"),
        ([queue_doc(namespaces=[])], "GPUQueue q: spec.namespaces: must list at least 1"),
        ([queue_doc(weight=0)], "GPUQueue q: spec.weight: must be > 0"),
        ([queue_doc(priority=-1)], "spec.priority: must be 0..1000000"),
        ([pool_doc(), queue_doc(quotas=[{"pool": "a", "guaranteed": -1}])],
         "spec.quotas[0].guaranteed: must be >= 0"),
        ([pool_doc(), queue_doc(quotas=[{"pool": "a", "guaranteed": 4, "ceiling": 2}])],
         "spec.quotas[0].ceiling: must be >= guaranteed"),
        ([pool_doc(), queue_doc(quotas=[{"pool": "a"}, {"pool": "a"}])],
         "spec.quotas[1]: duplicate pool 'a'"),
        ([queue_doc(quotas=[{"pool": "nope"}])], "spec.quotas: unknown pool 'nope'"),
        ([queue_doc(quotas=[{"guaranteed": 1}])], "spec.quotas[0].pool: required"),
        ([queue_doc(minRuntimeBeforePreemption="10 minutes")],
         "spec.minRuntimeBeforePreemption: must be a duration"),
        ([queue_doc(reclaimable="yes")], "spec.reclaimable: must be true or false"),
        ([queue_doc(maxConcurrentPods=-1)], "spec.maxConcurrentPods: must be >= 0"),
        ([pool_doc(governance={"idleGrace": "30m"})],
         "spec.governance.idleThreshold: idleThreshold and idleGrace are set together"),
        ([pool_doc(governance={"idleThreshold": {"gpuUtilPercent": 101}, "idleGrace": "1m"})],
         "spec.governance.idleThreshold.gpuUtilPercent: must be >= 0 and <= 100"),
        ([pool_doc(governance={"maxShareDuration": "1d"})],
         "spec.governance.maxShareDuration: must be a duration"),
        ([pool_doc(governance={"exemptClasses": "dev"})],
         "spec.governance.exemptClasses: must be a list"),
        ([pool_doc(governance=[])], "spec.governance: must be a mapping"),
        ([pool_doc(consolidation={"mode": True})],
         "GPUPool a: spec.consolidation.mode: must be one of Disabled, ReportOnly, Enabled"),
        ([pool_doc(consolidation={"restartCost": "10 minutes"})],
         "spec.consolidation.restartCost: must be a duration"),
        ([pool_doc(consolidation={"restartCostByClass": {"training": "1 hour"}})],
         "spec.consolidation.restartCostByClass.training: must be a duration"),
        ([pool_doc(consolidation={"maxMovesPerHour": 0})],
         "spec.consolidation.maxMovesPerHour: must be 1..1000, got 0"),
        ([pool_doc(consolidation={"maxMovesPerWorkloadPerHour": "1"})],
         "spec.consolidation.maxMovesPerWorkloadPerHour: must be an integer"),
        ([pool_doc(disruptionBudgetWait="5 minutes")],
         "GPUPool a: spec.disruptionBudgetWait: must be a duration"),
        ([pool_doc(maxEvictionGracePeriodSeconds=0)],
         "GPUPool a: spec.maxEvictionGracePeriodSeconds: must be 1..3600, got 0"),
        ([pool_doc(maxEvictionGracePeriodSeconds="30")],
         "GPUPool a: spec.maxEvictionGracePeriodSeconds: must be an integer"),
        ([queue_doc(maxShareDuration="0s")], "GPUQueue q: spec.maxShareDuration: must be longer"),
        ([{"kind": "Pod", "metadata": {"name": "x"}}], "document 0: kind: must be GPUPool"),
        ([{"kind": "GPUQueue", "spec": {}}], "document 0 (GPUQueue): metadata.name: required"),
        (["text"], "document 0: must be a mapping"),
    ],
)  # fmt: skip
def test_bad_documents_name_the_field(documents: list[Any], message: str) -> None:
    with pytest.raises(PolicyConfigError) as caught:
        parse_policy(documents)
    assert message in str(caught.value)


def test_consolidation_settings_parse_with_their_defaults() -> None:
    config = parse_policy(
        [
            pool_doc("on", consolidation={
                "mode": "Enabled", "restartCost": "2m", "restartCostByClass": {"training": "1h"},
                "maxMovesPerHour": 3, "minWait": "1m",
            }),
            pool_doc("plain"),
        ]
    )  # fmt: skip
    on, plain = config.pools
    assert on.consolidation.mode is ConsolidationMode.ON
    assert on.consolidation.restart_cost_of("training") == 3600.0
    assert on.consolidation.restart_cost_of("inference") == 120.0
    assert (on.consolidation.max_moves_per_hour, on.consolidation.min_wait) == (3, 60.0)
    assert plain.consolidation == ConsolidationSpec()
    assert plain.consolidation.mode is ConsolidationMode.OFF
