"""Governance in the dynamic simulation: the model's timeline, and a short run's invariants."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpupool.sim.dynamic.governance_model import SIM_LIMITS, GovernanceModel, GovernanceSim
from gpupool.sim.dynamic.simulation import DynamicSettings, run_dynamic
from gpupool.sim.dynamic.usage_model import KINDS, PUBLISH_PERIOD, SAMPLE_PERIOD, UsageModel
from gpupool.sim.policy_file import load_policy
from gpupool.sim.trace import read_nodes, read_pods


def _sim(idle: float, overrun: float, kind: str = "training") -> GovernanceSim:
    mix = tuple(1.0 if name == kind else 0.0 for name in KINDS)
    model = GovernanceModel(idle, overrun, idle_linger_mean=1e5, usage=UsageModel(mix=mix))
    return GovernanceSim(model, np.random.default_rng(2), (0.0, 1e9))


def _evicted_at(sim: GovernanceSim, name: str, until: float, step: float = 20.0) -> float | None:
    now = 0.0
    while now <= until:
        if name in sim.tick(now, waiting=1):
            sim.ended(name, now)
            return now
        now += step
    return None


@pytest.mark.parametrize("kind", KINDS)
def test_idle_pod_reclaimed_after_idle_period_and_grace_never_while_working(kind: str) -> None:
    sim = _sim(1.0, 0.0, kind)
    hold = sim.hold_time("p", 1000.0)
    assert hold > 3000.0  # work, then a long linger (seeded)
    sim.started("p", 0.0, 1000)
    evicted = _evicted_at(sim, "p", hold)
    assert evicted is not None
    # idle from t=1000: warned after the pool's idle period (or the longer one the pod's resumed
    # quiet phases earned, at most the cap), evicted after the grace; a publication (60 s) and
    # a check (20 s) late at most
    limits = SIM_LIMITS
    longest = limits.quiet_history_cap * limits.idle_period
    assert 1000.0 + limits.idle_period + limits.grace <= evicted
    assert evicted <= 1000.0 + longest + limits.grace + PUBLISH_PERIOD + 20.0 + SAMPLE_PERIOD
    report = sim.report(evicted, allocated_gpu_hours=evicted / 3600.0)
    assert report["false_reclaims"] == 0
    assert report["idle_reclaims"] == 1
    assert report["idle_gpu_hours_reclaimed"] == pytest.approx((hold - evicted) / 3600.0)
    beyond = hold - (1000.0 + limits.idle_period + limits.grace)
    assert report["idle_gpu_hours_beyond_grace"] == pytest.approx(beyond / 3600.0)
    assert report["accounting_error_pct"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_working_pod_never_reclaimed_overrun_pod_evicted_after_limit_and_grace(kind: str) -> None:
    sim = _sim(0.0, 0.0, kind)
    sim.hold_time("busy", 5 * 3600.0)
    sim.started("busy", 0.0, 500)
    assert _evicted_at(sim, "busy", 5 * 3600.0, step=60.0) is None
    overrun = _sim(0.0, 1.0)
    hold = overrun.hold_time("long", 600.0)
    assert hold >= 1.5 * 6 * 3600.0
    overrun.started("long", 0.0, 1000)
    evicted = _evicted_at(overrun, "long", hold, step=60.0)
    assert evicted is not None
    assert 6 * 3600.0 + SIM_LIMITS.grace <= evicted <= 6 * 3600.0 + SIM_LIMITS.grace + 120.0
    assert overrun.report(evicted, evicted / 3600.0)["duration_evictions"] == 1


def test_bad_shares_name_the_field() -> None:
    with pytest.raises(ValueError, match="idle_share"):
        GovernanceModel(idle_share=1.5)
    with pytest.raises(ValueError, match="idle_share"):
        GovernanceModel(idle_share=0.7, overrun_share=0.5)


def test_short_run_gives_idle_time_back_without_false_reclaims(trace_dir: Path) -> None:
    nodes = read_nodes(trace_dir / "openb_node_list_gpu_node.csv")
    pods = read_pods(trace_dir / "openb_pod_list_default.csv")
    reports = {}
    for enforce in (False, True):
        settings = DynamicSettings(
            rho=0.9,
            hours=3.0,
            warmup_hours=1.0,
            seed=3,
            scale=0.05,
            governance=GovernanceModel(0.2, 0.02, enforce=enforce),
        )
        reports[enforce] = run_dynamic(nodes, pods, load_policy(None), settings)
    off, on = reports[False], reports[True]
    for report in (off, on):
        assert report["accounting_error_pct"] < 0.1
    assert off["idle_gpu_hours_reclaimed"] == 0
    assert on["false_reclaims"] == 0
    assert on["idle_reclaims"] > 0
    assert on["idle_gpu_hours_reclaimed"] > 0
    assert on["idle_gpu_hours"] < off["idle_gpu_hours"]


def test_cli_adds_the_governance_keys_and_names_a_bad_share(
    trace_dir: Path, tmp_path: Path
) -> None:
    base = [
        sys.executable, "-m", "gpupool", "sim", "dynamic",
        "--nodes", str(trace_dir / "openb_node_list_gpu_node.csv"),
        "--pods", str(trace_dir / "openb_pod_list_default.csv"),
        "--hours", "1.5", "--warmup", "0.5", "--scale", "0.05",
    ]  # fmt: skip
    out = tmp_path / "run.json"
    done = subprocess.run(
        [*base, "--json", str(out), "--idle-share", "0.2", "--overrun-share", "0.01"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    for key in (
        "idle_gpu_hours",
        "idle_gpu_hours_reclaimed",
        "false_reclaims",
        "gpu_hours_returned_to_waiting_pods",
        "accounting_error_pct",
    ):
        assert key in report
    assert report["false_reclaims"] == 0
    bad = subprocess.run(
        [*base, "--json", str(out), "--idle-share", "1.5"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode != 0
    assert "--idle-share" in bad.stderr
