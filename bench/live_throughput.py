"""Live bind throughput of gpupool and kube-scheduler on one real local control plane.

A thin wrapper over :mod:`gpupool.bench.live` (the same code as ``gpupool bench live``), kept in
``bench/`` next to the other benchmark scripts. Needs the control-plane binaries
(``scripts/build-control-plane.sh``, exported as ``GPUPOOL_CONTROLPLANE_BIN``).

    .venv/bin/python bench/live_throughput.py --runs 3 --json out/bench/live_throughput.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from gpupool.bench.live import LiveBenchError, LiveConfig, format_table, report_ok, run_live


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--schedulers", default="gpupool,kube-scheduler")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--max-foreign-cpu", type=float, default=0.1)
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument("--gpupool-args", default="", help="e.g. '--log-level warning'")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    config = LiveConfig(
        nodes=args.nodes,
        pods=args.pods,
        gpus_per_node=args.gpus_per_node,
        runs=args.runs,
        schedulers=tuple(s.strip() for s in args.schedulers.split(",") if s.strip()),
        concurrency=args.concurrency,
        timeout=args.timeout,
        gpupool_args=tuple(shlex.split(args.gpupool_args)),
        max_foreign_cpu=args.max_foreign_cpu,
        retries=args.retries,
    )
    try:
        config.validate()
        report = run_live(config, lambda text: print(text, file=sys.stderr, flush=True))
    except (ValueError, LiveBenchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    print(format_table(report))
    return 0 if report_ok(report) else 1


if __name__ == "__main__":
    sys.exit(main())
