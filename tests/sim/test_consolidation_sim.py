"""Consolidation in the dynamic simulation: moves that pay, nothing moved when off or reporting."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpupool.policy.spec import ConsolidationMode, ConsolidationSpec
from gpupool.sim.dynamic.simulation import DynamicSettings, run_dynamic
from gpupool.sim.policy_file import load_policy
from gpupool.sim.trace import read_nodes, read_pods

SETTINGS = DynamicSettings(rho=1.0, hours=2.5, seed=1, warmup_hours=0.5, scale=0.25)
ON = ConsolidationSpec(mode=ConsolidationMode.ON)


def _run(trace_dir: Path, consolidation: ConsolidationSpec | None) -> dict[str, Any]:
    nodes = read_nodes(trace_dir / "openb_node_list_gpu_node.csv")
    pods = read_pods(trace_dir / "openb_pod_list_default.csv")
    settings = replace(SETTINGS, consolidation=consolidation)
    return run_dynamic(nodes, pods, load_policy(None), settings)


@pytest.fixture(scope="module")
def runs(trace_dir: Path) -> dict[str, dict[str, Any]]:
    return {
        "off": _run(trace_dir, None),
        "on": _run(trace_dir, ON),
        "report": _run(trace_dir, replace(ON, mode=ConsolidationMode.REPORT_ONLY)),
    }


def _decisions(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in ("wall_seconds", "consolidation")}


def test_moves_are_made_only_when_their_gain_exceeds_their_cost(
    runs: dict[str, dict[str, Any]],
) -> None:
    moved = runs["on"]["consolidation"]
    assert moved["mode"] == "Enabled"
    assert moved["plans"] >= 1
    assert moved["moves"] >= moved["plans"]
    assert moved["least_plan_margin_gpu_hours"] > 0
    assert moved["gpu_hours_gained_by_model"] > moved["gpu_hours_lost_to_moves"] > 0
    # a move costs at most a whole GPU's restart (600 s) per moved pod of at most 8 GPUs
    assert moved["gpu_hours_lost_to_moves"] <= moved["moves"] * 8 * 600 / 3600
    assert moved["moves_per_hour"] <= 2 * 32  # two pools, each capped at 32 moves an hour
    assert runs["on"]["quota_overrun_max"] == 0.0
    assert _decisions(runs["on"]) != _decisions(runs["off"])


def test_report_only_moves_nothing_and_changes_no_decision(
    runs: dict[str, dict[str, Any]],
) -> None:
    report = runs["report"]["consolidation"]
    assert report["report_only_plans"] >= 1
    assert report["moves"] == report["plans"] == 0
    assert _decisions(runs["report"]) == _decisions(runs["off"])
    assert runs["off"]["consolidation"]["mode"] == "Disabled"
    assert runs["off"]["consolidation"]["moves"] == 0
