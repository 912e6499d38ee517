"""The dynamic simulation and the policy engine in the replay, on the real openb trace.

* The FGD-protocol replay gives exactly the same placements through the policy engine (no
  pools, no queues) as straight through the scheduler, so switching the engine on changes no
  published number.
* A short dynamic run holds every metric the issue asks for, keeps every ceiling, and is a
  function of its seed; with half its pods asking by DRA claim it is the same run.
* ``gpupool sim dynamic`` as a user runs it: a bad option or a bad pools-and-queues file ends
  with one line naming it; a good run writes the JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpupool.core.framework import Scheduler
from gpupool.core.model import PodSpec
from gpupool.scheduling.policies.gpupool_default import GpupoolPolicy
from gpupool.scheduling.registry import PolicyContext, build_policy
from gpupool.scheduling.workload import TargetWorkload
from gpupool.sim.dynamic.pod_rules import GROUP_LABEL, PodRuleShares
from gpupool.sim.dynamic.simulation import DynamicSettings, _DynamicRun, run_dynamic
from gpupool.sim.policy_file import load_policy
from gpupool.sim.replay.protocol import seeded_run
from gpupool.sim.replay.run import replay
from gpupool.sim.trace import read_nodes, read_pods, read_trace


@pytest.mark.parametrize("policy_name", ["fgd", "default"])
def test_the_engine_changes_no_placement_in_the_published_replay(
    trace_dir: Path, policy_name: str
) -> None:
    trace = read_trace(
        trace_dir / "openb_node_list_gpu_node.csv", trace_dir / "openb_pod_list_default.csv"
    )
    nodes = sorted(trace.nodes, key=lambda node: node.name)[::8]
    metric = TargetWorkload.from_pods(trace.pods)
    results = []
    for engine in (False, True):
        run = seeded_run(nodes, trace.pods, 42)
        policy = build_policy(policy_name, PolicyContext(run.policy_rng, trace.pods))
        results.append(
            replay(nodes, run.arrivals, policy, metric, run.tie_rank, policy_engine=engine)
        )
    plain, through = results
    assert plain.placed > 0
    np.testing.assert_array_equal(plain.used_milli, through.used_milli)
    np.testing.assert_array_equal(plain.frag_milli, through.frag_milli)
    assert plain.failure_reasons == through.failure_reasons


def test_schedule_teaches_the_policy_nothing_and_observe_once_does() -> None:
    seen: list[str] = []
    policy = GpupoolPolicy()
    original = policy.observe

    def spy(pod: PodSpec) -> None:
        seen.append(pod.name)
        original(pod)

    policy.observe = spy  # type: ignore[method-assign]
    from gpupool.core.model import NodeSpec
    from gpupool.core.snapshot import ClusterSnapshot

    snapshot = ClusterSnapshot([NodeSpec("n", 8000, 8192, 2, "T4")])
    pod = PodSpec("p", 1000, 1024, gpu_count=1, gpu_milli=500)
    scheduler = Scheduler(policy)
    scheduler.schedule(snapshot, pod)
    scheduler.schedule(snapshot, pod)
    assert seen == []
    scheduler.observe(pod)
    scheduler.schedule(snapshot, pod)
    assert seen == ["p"]


@pytest.fixture(scope="module")
def short_runs(trace_dir: Path) -> list[dict[str, Any]]:
    nodes = read_nodes(trace_dir / "openb_node_list_gpu_node.csv")
    pods = read_pods(trace_dir / "openb_pod_list_default.csv")
    config = load_policy(None)
    settings = DynamicSettings(rho=1.2, hours=2.0, seed=3, warmup_hours=0.5, scale=0.25)
    return [run_dynamic(nodes, pods, config, settings) for _ in range(2)]


def test_a_short_dynamic_run_reports_every_metric_and_keeps_ceilings(
    short_runs: list[dict[str, Any]],
) -> None:
    report = short_runs[0]
    assert report["seeds"] == [3]
    assert 30.0 < report["gpu_utilisation"] <= 100.0
    assert set(report["queue_delay_s"]) == {"vision", "nlp", "serving", "research"}
    for cell in report["queue_delay_s"].values():
        assert 0.0 <= cell["p50"] <= cell["p95"]
    assert 0.0 < report["jain_fairness"] <= 1.0
    assert report["preemptions"] >= 0
    assert report["gpu_hours_lost_to_preemption"] >= 0.0
    assert report["quota_overrun_max"] == 0.0
    assert report["started"] > 1000
    never = report["never_started_by_size"]  # overloaded: some of the window's pods wait on
    assert 0 < sum(never.values()) <= report["pending_at_end"]
    for size, count in never.items():
        assert 0 < count <= report["queue_delay_s_by_size"][size]["count"]
    json.dumps(report, allow_nan=False)


def test_the_report_charges_pending_time_to_the_classes_that_cause_it(
    short_runs: list[dict[str, Any]],
) -> None:
    """Under overload, capacity waits are charged to the classes holding the GPUs; every
    charged second is imposed on others, self-imposed or unattributed, never more."""
    congestion = short_runs[0]["congestion_by_class"]
    rows = congestion["classes"]
    assert rows
    assert any(row["imposed_by_cause"].get("insufficient_resources", 0) > 0 for row in rows)
    waits = sum(
        seconds
        for row in rows
        for cause, seconds in row["imposed_by_cause"].items()
        if cause != "preemption"
    )
    assert 0 < waits <= congestion["pending_seconds"]
    assert all(row["contention_share"] is None for row in rows)


def test_the_same_seed_gives_the_same_run(short_runs: list[dict[str, Any]]) -> None:
    first, second = ({k: v for k, v in r.items() if k != "wall_seconds"} for r in short_runs)
    assert first == second


def test_half_the_pods_asking_by_claim_change_no_decision(
    trace_dir: Path, short_runs: list[dict[str, Any]]
) -> None:
    """The same run with half the GPU and share pods asking by a claim: every number equal.

    A claim pod reaches the engine with its eligible GPUs (here every GPU, a claim without
    selectors); placement, order, backfill and preemption must treat it as the same pod by
    extended resource, or the claim path is a second policy.
    """
    nodes = read_nodes(trace_dir / "openb_node_list_gpu_node.csv")
    pods = read_pods(trace_dir / "openb_pod_list_default.csv")
    settings = DynamicSettings(rho=1.2, hours=2.0, seed=3, warmup_hours=0.5, scale=0.25, claims=0.5)
    mixed = run_dynamic(nodes, pods, load_policy(None), settings)
    assert 0.4 < mixed["claim_pods"] / mixed["arrivals"] < 0.6
    assert short_runs[0]["claim_pods"] == 0
    ignored = {"wall_seconds", "claims", "claim_pods"}
    by_resource, by_claim = (
        {k: v for k, v in r.items() if k not in ignored} for r in (short_runs[0], mixed)
    )
    assert by_claim == by_resource


def test_replica_groups_with_pod_rules_are_placed_as_their_rules_say(trace_dir: Path) -> None:
    """A share of the GPU pods with anti-affinity or spread: no two anti-affine replicas of a
    group share a node, and no spread group (maxSkew 1 over every node, most of which hold
    none of it) puts two on one, whenever the run is stopped (here: at its end)."""
    nodes = read_nodes(trace_dir / "openb_node_list_gpu_node.csv")
    pods = read_pods(trace_dir / "openb_pod_list_default.csv")
    rules = PodRuleShares(anti_affinity=0.2, spread=0.1)
    settings = DynamicSettings(
        rho=1.0, hours=1.5, seed=5, warmup_hours=0.5, scale=0.25, pod_rules=rules
    )
    run = _DynamicRun(nodes, pods, load_policy(None), settings)
    run.simulate()
    report = run.report(0.0)
    gpu_arrivals = report["anti_affinity_pods"] + report["spread_pods"]
    assert report["anti_affinity_pods"] > report["spread_pods"] > 0
    assert gpu_arrivals < report["arrivals"]
    groups: dict[tuple[str, str], list[str]] = {}
    for allocation in run.snapshot.allocations.values():
        pod = allocation.pod
        if pod.terms is not None:
            rule = "anti" if pod.terms.anti_affinity else "spread"
            groups.setdefault((rule, dict(pod.labels)[GROUP_LABEL]), []).append(
                run.snapshot.node_names[allocation.node]
            )
    anti = [hosts for (rule, _), hosts in groups.items() if rule == "anti"]
    spread = [hosts for (rule, _), hosts in groups.items() if rule == "spread"]
    assert anti
    assert spread
    assert all(len(hosts) == len(set(hosts)) for hosts in anti + spread)
    assert sum(len(hosts) for hosts in anti) > len(anti)  # groups of several replicas ran


def gpupool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupool", "sim", "dynamic", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--load", "0"], "error: --load: out of range (0.0)"),
        (["--warmup", "9"], "error: --warmup: out of range (9.0)"),
        (
            ["--anti-affinity", "0.7", "--spread", "0.5"],
            "error: --anti-affinity + --spread: must be at most 1",
        ),
        (["--reservations", "0"], "error: --reservations: must be at least 1 (0)"),
        (
            ["--consolidation", "sometimes"],
            "error: --consolidation: choose one of disabled, report-only, enabled",
        ),
        (
            ["--consolidation", "enabled", "--restart-cost", "-1"],
            "error: --restart-cost: must be >= 0, got -1.0",
        ),
        (
            ["--reserve-above-units", "-1"],
            "error: --reserve-above-units: must be at least 0 (-1)",
        ),
        (
            ["--backfill-quantile", "1"],
            "error: --backfill-quantile: must lie between 0 and 1 (1.0)",
        ),
        (
            ["--backfill", "eager"],
            "error: --backfill: unknown mode 'eager'; choose one of large-pods, easy, strict",
        ),
        (["--policy", "nope"], "error: --policy: unknown policy 'nope'"),
        (["--config", "/nonexistent.yaml"], "error: --config: no such file /nonexistent.yaml"),
    ],
)
def test_bad_options_name_the_option(
    trace_dir: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    done = gpupool(
        "--nodes", str(trace_dir / "openb_node_list_gpu_node.csv"),
        "--pods", str(trace_dir / "openb_pod_list_default.csv"),
        "--json", str(tmp_path / "out.json"), *args,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == message or message in done.stderr


def test_a_bad_config_names_file_object_and_field(trace_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "teams.yaml"
    config.write_text(
        "kind: GPUPool\nmetadata: {name: a}\nspec: {mode: Shared}\n---\n"
        "kind: GPUQueue\nmetadata: {name: q}\nspec:\n  namespaces: [q]\n"
        "  quotas: [{pool: a, guaranteed: 4, ceiling: 2}]\n"
    )
    done = gpupool(
        "--nodes", str(trace_dir / "openb_node_list_gpu_node.csv"),
        "--pods", str(trace_dir / "openb_pod_list_default.csv"),
        "--json", str(tmp_path / "out.json"), "--config", str(config),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: {config}: GPUQueue q: spec.quotas[0].ceiling: must be >= guaranteed"
    )
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize(
    ("args", "engine"),
    [
        (
            ["--backfill", "strict", "--no-preemption"],
            (False, 16, True, 1000, True, 0.9, False, True),
        ),
        ([], (True, 16, True, 1000, True, 0.9, True, True)),
        (
            ["--backfill", "easy", "--reservations", "4", "--remaining-by-age"],
            (True, 4, False, None, True, None, True, True),
        ),
        (["--no-gang-reservations"], (True, 16, True, 1000, True, 0.9, True, False)),
    ],
    ids=["strict", "default", "easy-changed", "no-gang-reservations"],
)
def test_a_run_writes_its_json_with_the_engine_it_ran(
    trace_dir: Path, tmp_path: Path, args: list[str], engine: tuple[object, ...]
) -> None:
    out = tmp_path / "dyn.json"
    done = gpupool(
        "--nodes", str(trace_dir / "openb_node_list_gpu_node.csv"),
        "--pods", str(trace_dir / "openb_pod_list_default.csv"),
        "--json", str(out), "--load", "0.8", "--hours", "1", "--warmup", "0.5",
        "--scale", "0.1", "--seed", "7", *args,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert (report["rho"], report["seed"]) == (0.8, 7)
    keys = ("backfill", "reservations", "follow", "reserve_above_units", "remaining_by_age")
    more = ("backfill_quantile", "preemption", "gang_reservations")
    assert tuple(report[k] for k in (*keys, *more)) == engine
    if not report["backfill"]:
        assert report["backfilled"] == 0
    if not report["preemption"]:
        assert report["preemptions"] == 0
    assert "GPU utilisation" in done.stdout


def test_a_teams_node_selector_keeps_its_pods_to_the_nodes_it_names(
    trace_dir: Path, tmp_path: Path
) -> None:
    """nlp asks for a model no node has: none of its pods ever runs; vision's still do."""
    out = tmp_path / "dyn.json"
    done = gpupool(
        "--nodes", str(trace_dir / "openb_node_list_gpu_node.csv"),
        "--pods", str(trace_dir / "openb_pod_list_default.csv"),
        "--json", str(out), "--load", "0.8", "--hours", "1", "--warmup", "0.5",
        "--scale", "0.1", "--seed", "7",
        "--team-node-selector", "nlp=gpupool.io/gpu-model=H200",
        "--team-node-selector", "vision=gpupool.io/gpu-model=G2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["team_node_selectors"] == {
        "nlp": {"gpupool.io/gpu-model": "H200"},
        "vision": {"gpupool.io/gpu-model": "G2"},
    }
    shares = report["weighted_dominant_share"]
    assert shares["nlp"] == 0.0
    assert shares["vision"] > 0.0  # G2 nodes are labelled with their model, and exclusive


def test_a_bad_team_node_selector_names_the_option(trace_dir: Path, tmp_path: Path) -> None:
    done = gpupool(
        "--nodes", str(trace_dir / "openb_node_list_gpu_node.csv"),
        "--pods", str(trace_dir / "openb_pod_list_default.csv"),
        "--json", str(tmp_path / "out.json"), "--team-node-selector", "nlp",
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --team-node-selector: expected TEAM=KEY=VALUE, got 'nlp'"
    )
