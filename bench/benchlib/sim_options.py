"""The options every dynamic-simulation benchmark takes, parsed once.

``bench/sim_dynamic_matrix.py`` and ``bench/sim_governance.py`` sweep the same trace over loads
and seeds with the same warm-up and worker count; declaring and reading those options here keeps
their spelling and meaning the same in both.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

TRACE_DIR = Path("../shared/data/openb")


def add_sweep_options(
    parser: argparse.ArgumentParser, *, loads: str, seeds: str, hours: float, warmup: float
) -> None:
    """``--trace-dir --loads --seeds --hours --warmup --jobs`` with these defaults."""
    parser.add_argument("--trace-dir", type=Path, default=TRACE_DIR)
    parser.add_argument("--loads", default=loads)
    parser.add_argument("--seeds", default=seeds)
    parser.add_argument("--hours", type=float, default=hours)
    parser.add_argument("--warmup", type=float, default=warmup)
    parser.add_argument("--jobs", type=int, default=2)


@dataclass(frozen=True, slots=True)
class Sweep:
    """The trace files, loads and seeds a sweep runs."""

    nodes: Path
    pods: Path
    loads: list[float]
    seeds: list[int]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Sweep:
        """Read the sweep options of ``add_sweep_options``."""
        return cls(
            nodes=args.trace_dir / "openb_node_list_gpu_node.csv",
            pods=args.trace_dir / "openb_pod_list_default.csv",
            loads=[float(x) for x in args.loads.split(",")],
            seeds=[int(x) for x in args.seeds.split(",")],
        )
