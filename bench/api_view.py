"""How long the REST API and dashboard hold the scheduler's loop, by cluster size.

The face reads the live scheduler's cache in the scheduler's own event loop, so every request
could be time the loop does not schedule. Requests therefore only take a detached copy in the
loop (``detach``) and build the answer in a worker thread. This builds clusters of ``--nodes``
8-GPU nodes, three in four GPUs holding one to four shares, plus 2% of the pods pending, and
times (median of ``--repeats``) the copy and each answer built from it: ``/api/v1/cluster``,
``/api/v1/nodes`` (model, and model plus JSON), ``/api/v1/pending``, one ``explain`` and the
dashboard's live fragment (``/ui/live``, rendered every 2 s per open page). Writes JSON with the
machine and the git commit.

    .venv/bin/python bench/api_view.py --nodes 100,1000,5000 --json out/bench/api_view.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pydantic import TypeAdapter

from gpupool.api import view
from gpupool.api.dashboard import render_live
from gpupool.api.explain import explain
from gpupool.api.model import Node
from gpupool.api.sources import SnapshotView
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.scheduling.wait_cause import WaitCause, WaitKind
from gpupool.sim.provenance import provenance


def build(nodes: int, seed: int) -> SnapshotView:
    """A cluster of ``nodes`` 8-GPU A100 nodes, three in four GPUs shared by 1-4 pods."""
    rng = np.random.default_rng(seed)
    specs = [NodeSpec(f"node-{i:05d}", 128000, 1 << 20, 8, "A100", 81920) for i in range(nodes)]
    snapshot = ClusterSnapshot(specs)
    count = 0
    for row in range(nodes):
        for gpu in range(8):
            if rng.random() < 0.25:
                continue
            sharers = int(rng.integers(1, 5))
            for _ in range(sharers):
                pod = PodSpec(f"team-{count % 12}/pod-{count}", 500, 1024, 1, 1000 // sharers, 8192)
                snapshot.bind(pod, row, (gpu,))
                count += 1
    why = WaitCause(WaitKind.RESOURCES, "0/N nodes are available: Insufficient gpupool.io/gpu")
    waiting = [
        (PodSpec(f"team-{i % 12}/wait-{i}", 1000, 2048, 4, 1000), why)
        for i in range(max(1, count // 50))
    ]
    return SnapshotView(snapshot, waiting, source="bench")


def timed(run: Callable[[], object], repeats: int) -> float:
    walls = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        walls.append(time.perf_counter() - started)
    return statistics.median(walls)


NODES = TypeAdapter(list[Node])


def measure(source: SnapshotView, repeats: int) -> dict[str, float]:
    """Milliseconds (median) of the copy and of each answer built from it."""
    frozen = source.detached()
    first = frozen.waiting()[0].info.key
    reads: dict[str, Callable[[], object]] = {
        "detach": source.detached,
        "cluster": lambda: view.cluster(frozen),
        "nodes_model": lambda: view.nodes(frozen),
        "nodes_json": lambda: NODES.dump_json(view.nodes(frozen)),
        "pending": lambda: view.pending(frozen),
        "explain": lambda: explain(frozen, first),
        "dashboard_fragment": lambda: render_live(frozen),
    }
    return {f"{name}_ms": round(timed(run, repeats) * 1000, 1) for name, run in reads.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,1000,5000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results = []
    for size in (int(n) for n in args.nodes.split(",")):
        source = build(size, args.seed)
        snapshot = source.snapshot()
        assert snapshot is not None
        row: dict[str, object] = {
            "nodes": size,
            "gpus": size * 8,
            "pods": len(snapshot.allocations),
            "pending": len(source.waiting()),
        }
        timings = measure(source, args.repeats)
        row |= timings
        results.append(row)
        print(
            f"{size:>6} nodes, {row['pods']:>6} pods: "
            + ", ".join(f"{name.removesuffix('_ms')} {ms} ms" for name, ms in timings.items()),
            flush=True,
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"results": results, "repeats": args.repeats, **provenance()}
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
