"""Live bind throughput of gpupool and kube-scheduler on one real local control plane.

The same command as ``gpupool bench live`` (same options, same code: :mod:`gpupool.bench.live`),
kept in ``bench/`` next to the other benchmark scripts so that one options parser cannot drift
from another. Needs the control-plane binaries (``scripts/build-control-plane.sh``, exported as
``GPUPOOL_CONTROLPLANE_BIN``). ``--runs`` must be even: the order of the two schedulers
alternates ABBA.

    .venv/bin/python bench/live_throughput.py --runs 4 --json out/bench/live_throughput.json
    .venv/bin/python bench/live_throughput.py --nodes 50 --pods 200 --runs 2   # a smoke run
"""

from __future__ import annotations

import typer

from gpupool.cli.bench_live import bench_live

if __name__ == "__main__":
    typer.run(bench_live)
