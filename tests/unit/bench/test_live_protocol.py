"""The live bench's protocol without a cluster: ABBA order, even runs, the verdict's words."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from benchlib.live_config import LiveConfig, phase_order
from benchlib.live_report import compare, report_ok

from gpupool.sim.provenance import provenance, source_state

AB = ("gpupool", "kube-scheduler")


def test_abba_gives_each_scheduler_the_first_slot_in_half_of_any_even_number_of_runs() -> None:
    orders = [phase_order(AB, slot) for slot in range(8)]
    abba = ["gpupool", "kube-scheduler", "kube-scheduler", "gpupool"]
    assert [order[0] for order in orders] == abba * 2
    for runs in range(2, 13, 2):
        firsts = [phase_order(AB, slot)[0] for slot in range(runs)]
        assert firsts.count("gpupool") == firsts.count("kube-scheduler") == runs // 2
    assert all(sorted(order) == sorted(AB) for order in orders)
    assert phase_order(("kube-scheduler",), 1) == ("kube-scheduler",)


@pytest.mark.parametrize(
    ("config", "option"),
    [
        (LiveConfig(runs=3), "--runs"),
        (LiveConfig(runs=0), "--runs"),
        (LiveConfig(schedulers=("gpupool", "gpupool")), "--schedulers"),
        (LiveConfig(schedulers=("volcano",)), "--schedulers"),
        (LiveConfig(nodes=2, pods=17), "--pods"),
        (LiveConfig(max_foreign_cpu=0), "--max-foreign-cpu"),
    ],
)
def test_bad_settings_name_their_option(config: LiveConfig, option: str) -> None:
    with pytest.raises(ValueError, match=f"^{option}:"):
        config.validate()


def test_odd_runs_are_fine_for_one_scheduler_and_four_is_the_default() -> None:
    LiveConfig(runs=3, schedulers=("kube-scheduler",)).validate()
    assert LiveConfig().runs == 4
    LiveConfig().validate()


@pytest.mark.parametrize(
    ("ours", "theirs", "verdict", "spread"),
    [
        # the review's case: medians 0.6% apart, single runs 30% apart
        ([268.6, 194.5, 202.7, 199.0], [210.4, 201.4, 161.6, 200.0], "level", 74.1),
        ([300.0, 310.0, 305.0, 302.0], [200.0, 210.0, 205.0, 202.0], "faster", 10.0),
        ([200.0, 210.0, 205.0, 202.0], [300.0, 310.0, 305.0, 302.0], "slower", 10.0),
        # a difference exactly the spread is not "less than" it
        ([100.0, 110.0], [110.0, 120.0], "slower", 10.0),
        ([100.0, None, 110.0], [105.0, 106.0], "level", 10.0),
    ],
)
def test_verdict_is_level_unless_the_medians_differ_by_the_spread(
    ours: list[float | None], theirs: list[float | None], verdict: str, spread: float
) -> None:
    result = compare(ours, theirs)
    assert result["verdict"] == verdict
    assert result["spread"] == spread
    assert result["words"].startswith(
        "gpupool is " + ("level with" if verdict == "level" else f"{verdict} than")
    )
    assert "range" in result["spread_definition"]


def test_no_verdict_without_two_complete_runs_each() -> None:
    assert compare([200.0, None], [100.0, 120.0])["verdict"] == "undecided"


def test_provenance_names_the_commit_and_whether_the_tree_was_dirty() -> None:
    here = Path(__file__).parent
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True
    ).stdout.strip()
    state = source_state()
    assert state["commit"] == head
    assert isinstance(state["dirty"], bool)
    block = provenance()
    assert block["source"] == state
    assert "usable_cpus" in block["machine"]
    assert "binaries" not in block


def test_a_phase_with_more_pods_than_gpus_on_a_node_fails_the_run() -> None:
    def report(node_counts_ok: bool) -> dict[str, object]:
        phase = {"complete": True, "node_counts": {"ok": node_counts_ok}}
        return {
            "failed_runs": [],
            "gpupool_allocations_ok": None,
            "per_run": [{"phases": {"x": phase}}],
        }

    assert report_ok(report(True))
    assert not report_ok(report(False))
