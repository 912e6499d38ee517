"""What one ``bench live`` invocation measures, and in which order its phases run.

Checked before anything starts (a bad value is an error naming its option), because a run takes
minutes: an odd ``--runs`` when two schedulers are compared is refused, since the ABBA order
(:func:`phase_order`) is balanced only over an even number of runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benchlib.live_setup import DEFAULT_SCHEDULERS, SCHEDULERS


@dataclass(frozen=True, slots=True)
class LiveConfig:
    """One ``bench live`` invocation.

    Attributes:
        nodes: Fresh kwok nodes per phase.
        pods: Pods per phase, one GPU each.
        gpus_per_node: GPUs per node.
        runs: Independent runs, each on a fresh control plane; even when two schedulers are
            compared, so that the ABBA order gives each the first slot equally often.
        schedulers: Which phases to run (``gpupool``, ``kube-scheduler``, ``gpupool-claims``:
            gpupool with the pods asking by ResourceClaim); the first is "A".
        concurrency: Concurrent create requests.
        timeout: Seconds a scheduler gets to bind every pod before the run fails.
        kube_qps: kube-scheduler client QPS.
        kube_burst: kube-scheduler client burst.
        gpupool_args: Extra arguments for ``gpupool control-plane`` (``--log-level warning``).
        max_foreign_cpu: A run in which other processes used more than this share of the CPUs
            while a scheduler was binding is set aside and run again (1.0: never).
        retries: How many runs may be set aside that way in all.
        pod_rules: The share of pods with a required anti-affinity or a topology spread
            (:mod:`benchlib.live_rules`); 0: none.
        gangs: Pods per PodGroup that start together (:mod:`benchlib.live_gangs`); 0: none.
    """

    nodes: int = 1000
    pods: int = 5000
    gpus_per_node: int = 8
    runs: int = 4
    schedulers: tuple[str, ...] = DEFAULT_SCHEDULERS
    concurrency: int = 16
    timeout: float = 900.0
    kube_qps: int = 5000
    kube_burst: int = 5000
    gpupool_args: tuple[str, ...] = ()
    max_foreign_cpu: float = 0.1
    retries: int = 3
    pod_rules: float = 0.0
    gangs: int = 0

    def validate(self) -> None:
        """Raise ``ValueError`` naming the CLI option of a bad value."""
        if self.nodes < 1:
            raise ValueError("--nodes: must be >= 1")
        if self.pods < 1:
            raise ValueError("--pods: must be >= 1")
        if self.gpus_per_node < 1:
            raise ValueError("--gpus-per-node: must be >= 1")
        if self.pods > self.nodes * self.gpus_per_node:
            raise ValueError(
                f"--pods: {self.pods} one-GPU pods do not fit on {self.nodes} nodes x "
                f"{self.gpus_per_node} GPUs"
            )
        if self.runs < 1:
            raise ValueError("--runs: must be >= 1")
        if not self.schedulers or any(s not in SCHEDULERS for s in self.schedulers):
            raise ValueError(f"--schedulers: choose from {', '.join(SCHEDULERS)}")
        if len(set(self.schedulers)) != len(self.schedulers):
            raise ValueError("--schedulers: each scheduler once")
        if len(self.schedulers) > 1 and self.runs % 2:
            raise ValueError(
                f"--runs: must be even when schedulers are compared (got {self.runs}): "
                "the ABBA order lets each go first in half the runs"
            )
        if self.concurrency < 1:
            raise ValueError("--concurrency: must be >= 1")
        if self.timeout <= 0:
            raise ValueError("--timeout: must be > 0")
        if not 0 < self.max_foreign_cpu <= 1:
            raise ValueError("--max-foreign-cpu: must be in (0, 1]")
        if not 0 <= self.pod_rules <= 1:
            raise ValueError(f"--pod-rules: must be in [0, 1], got {self.pod_rules}")
        if self.gangs < 0:
            raise ValueError(f"--gangs: must be >= 0, got {self.gangs}")
        if self.retries < 0:
            raise ValueError("--retries: must be >= 0")


def phase_order(schedulers: Sequence[str], slot: int) -> tuple[str, ...]:
    """The order of the phases in kept run number ``slot`` (0-based): ABBA ABBA ...

    "A" (the first scheduler given) goes first when ``slot % 4`` is 0 or 3, so over any even
    number of runs each scheduler goes first in half of them, and over every four runs the
    first and second halves of the session are balanced too.
    """
    return tuple(schedulers) if slot % 4 in (0, 3) else tuple(reversed(schedulers))
