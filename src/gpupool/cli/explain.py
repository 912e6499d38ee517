"""``gpupool explain``: where would the next pod go, and which score terms decided?

It replays the default trace up to a given arrived load with gpupool's policy, then scores the
next arriving pod on every feasible node and prints the best candidates with the terms behind
each score (fragmentation before and after, the growth of what a share's GPU is expected to
keep for good, the score, tie-break bonus, node rank).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from gpupool.core.filtering import filter_nodes
from gpupool.scheduling.policies.gpupool_default import GpupoolPolicy
from gpupool.scheduling.workload import TargetWorkload
from gpupool.sim.replay.protocol import seeded_run
from gpupool.sim.replay.run import replay
from gpupool.sim.trace import read_trace


def run_explain(
    nodes_path: Path, pods_path: Path, seed: int, at_percent: float, top: int, console: Console
) -> None:
    """Replay to ``at_percent`` arrived load, then explain the next pod's best ``top`` nodes."""
    trace = read_trace(nodes_path, pods_path)
    run = seeded_run(trace.nodes, trace.pods, seed)
    arrivals, total_gpus, ranks = run.arrivals, run.total_gpus, run.tie_rank
    arrived = np.cumsum([pod.total_gpu_milli for pod in arrivals])
    cut = int(np.searchsorted(arrived, at_percent / 100 * total_gpus * 1000))
    cut = min(cut, len(arrivals) - 1)
    policy = GpupoolPolicy()
    result = replay(
        trace.nodes, arrivals[:cut], policy, TargetWorkload.from_pods(trace.pods), ranks
    )
    snapshot, pod = result.snapshot, arrivals[cut]
    policy.observe(pod)
    feasible = filter_nodes(snapshot, pod)
    request = (
        f"{pod.gpu_count} x {pod.gpu_milli} milli-GPU, " if pod.gpu_count else "no GPU, "
    ) + f"{pod.cpu_milli / 1000:g} vCPU"
    console.print(
        f"After {cut} arrivals ({at_percent:g}% of GPU capacity arrived, seed {seed}), the next "
        f"pod {pod.name} asks for {request}; {feasible.feasible_count} of {snapshot.size} nodes "
        "are feasible."
    )
    if feasible.feasible_count == 0:
        console.print(feasible.message())
        return
    scores = policy.score(snapshot, pod, feasible.mask)
    candidates = np.flatnonzero(feasible.mask)
    order = np.lexsort((ranks[candidates], -scores[candidates]))[:top]
    table = Table(title=f"Best {len(order)} nodes for {pod.name} (policy: default)")
    table.add_column("node", no_wrap=True)
    for column in ("frag before", "frag after", "kept +", "score", "tie-break", "total",
                   "rank", "GPUs"):  # fmt: skip
        table.add_column(column, justify="right")
    for node in candidates[order]:
        why = policy.explain(snapshot, pod, int(node))
        table.add_row(
            why.node,
            f"{why.fragmentation_before:.3f}",
            f"{why.fragmentation_after:.3f}",
            f"{why.leftover_change:+.3f}",
            f"{why.fgd_score:.0f}",
            f"+{why.tie_break[0]:.3f}",
            f"{why.total:.3f}",
            str(int(ranks[node])),
            ",".join(map(str, why.gpus)) or "-",
        )
    console.print(table)
    best = policy.explain(snapshot, pod, int(candidates[order[0]]))
    console.print(
        "Fragmentation is in GPUs expected to be stranded for the learned workload (CPU and "
        "memory aware); 'kept +' is how much more of a share's GPU is expected to stay free "
        "for good (weighted); score = trunc(100 sigmoid(before - after - kept +)); the "
        f"tie-break rewards: {best.tie_break[1]}. Equal totals go to the lower rank."
    )
