"""``gpupool sim dynamic --gangs``: a share of the multi-GPU pods arrives as gangs of one-GPU
pods; every gang starts whole, and no GPU-hour is held by a gang with fewer than its minCount
pods running, while the gangs really wait and really start."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gpupool.core.model import PodSpec
from gpupool.policy.workload import Workload
from gpupool.sim.dynamic.gang_arrivals import GangTally, as_gang
from gpupool.sim.dynamic.simulation import DynamicSettings, _DynamicRun
from gpupool.sim.policy_file import load_policy
from gpupool.sim.trace import read_nodes, read_pods


def test_a_chosen_multi_gpu_pod_arrives_as_a_gang_asking_the_same_gpus() -> None:
    pod = PodSpec("job", 8000, 32_000, gpu_count=4, gpu_milli=1000)
    members = as_gang(Workload(pod, namespace="ml"), share=1.0)
    assert members is not None
    assert [m.pod.name for m in members] == ["job-w0", "job-w1", "job-w2", "job-w3"]
    assert {(m.gang, m.pod.gpu_count, m.pod.cpu_milli, m.namespace) for m in members} == {
        ("job", 1, 2000, "ml")
    }
    assert as_gang(Workload(pod), share=0.0) is None
    single = PodSpec("one", 1000, 1000, gpu_count=1, gpu_milli=1000)
    assert as_gang(Workload(single), share=1.0) is None


def test_the_tally_counts_gpu_time_of_partial_gangs_and_whole_gang_waits() -> None:
    tally = GangTally((0.0, 100.0))
    tally.arrive("g", 2, 10.0)
    tally.started("g", 20.0)  # one of two running: partial from 20
    tally.started("g", 30.0)  # whole at 30: waited 20 s
    tally.ended("g", 50.0)  # one left: partial again until it ends
    tally.ended("g", 60.0)
    report = tally.report()
    assert report["gang_wait_p95_s"] == 20.0
    assert report["partial_gang_gpu_hours"] == (10.0 + 10.0) / 3600.0


def test_a_dynamic_run_with_gangs_starts_them_whole_and_holds_nothing_for_partial_ones(
    trace_dir: Path,
) -> None:
    nodes = read_nodes(trace_dir / "openb_node_list_gpu_node.csv")
    pods = read_pods(trace_dir / "openb_pod_list_default.csv")
    settings = DynamicSettings(rho=1.0, hours=1.5, seed=5, warmup_hours=0.5, scale=0.25, gangs=1.0)
    run = _DynamicRun(nodes, pods, load_policy(None), settings)
    run.simulate()
    report = run.report(0.0)
    assert report["gangs"] > 10
    assert report["gangs_started_in_window"] > 0
    assert report["gang_wait_p95_s"] >= report["gang_wait_p50_s"] >= 0.0
    assert report["partial_gang_gpu_hours"] == 0.0
    running = Counter(r.workload.gang for r in run.running.values() if r.workload.gang)
    assert all(count == run.gangs[gang].min_count for gang, count in running.items()), running
