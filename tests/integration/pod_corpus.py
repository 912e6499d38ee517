"""A seeded corpus of random, API-valid pods on four fake nodes, and whether each could ever fit.

The pods ask what docs/tenants.md says a pod may ask (CPU and memory, whole GPUs, a share of each
GPU by memory and compute, a MIG slice, allowed GPU models, a node selector, a priority class, a
workload class, a queue, a declared runtime), in combinations no hand-written test lists: some
fit every node, some fit one, some can never fit (more CPU or memory than any node has beside
GPUs, more GPUs than any node, a selector or a GPU model no node has, a MIG profile no node
offers) and a few ask what gpupool refuses to read (a compute share above 100%).

Whether a pod fits a node alone is computed here from the node shapes and the pod's manifest,
independently of the scheduler's code, so a test can tell what the scheduler had to do.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.devcluster.fakenodes import FakeGpuNode

Json = dict[str, Any]

LABEL_ZONE = "corpus-zone"


def corpus_nodes(prefix: str, selector: dict[str, str]) -> list[FakeGpuNode]:
    """The four nodes: 8 H100s, 4 A100s, 2 A100s with MIG slices, and a CPU-only node.

    CPU and memory are ample beside the GPUs, so what keeps a pod that fits one of them from
    being bound is GPU room, or other pods' CPU on a full node, never a shortage by design.
    """

    def labels(zone: str) -> tuple[tuple[str, str], ...]:
        return (*selector.items(), (LABEL_ZONE, zone))

    a100 = {"gpu_model": "A100", "gpu_memory_mib": 40960, "cpu": 32, "memory_gib": 256}
    return [
        FakeGpuNode(f"{prefix}-n0", gpus=8, cpu=64, memory_gib=512, labels=labels("a")),
        FakeGpuNode(f"{prefix}-n1", gpus=4, labels=labels("b"), **a100),
        FakeGpuNode(
            f"{prefix}-n2", gpus=2, labels=labels("b"), mig=(("1g.10gb", 7), ("3g.40gb", 2)), **a100
        ),
        FakeGpuNode(f"{prefix}-n3", gpus=0, cpu=16, memory_gib=64, labels=labels("c")),
    ]


@dataclass(frozen=True, slots=True)
class Ask:
    """What one corpus pod asks, as the test reads it back (not the scheduler's model).

    Attributes:
        cpu_milli: CPU in millicores.
        memory_mib: Memory in MiB.
        gpus: ``gpupool.io/gpu``.
        gpu_memory_mib: ``gpupool.io/gpu-memory`` per GPU (0: none asked).
        cores: ``gpupool.io/gpu-cores`` percent per GPU (0: none asked).
        mig: MIG profile ("" for none).
        models: Allowed GPU models (empty: any).
        zone: The zone its selector asks for ("" for any).
        readable: Whether gpupool can read the request at all (cores in 1..100).
    """

    cpu_milli: int
    memory_mib: int
    gpus: int = 0
    gpu_memory_mib: int = 0
    cores: int = 0
    mig: str = ""
    models: frozenset[str] = frozenset()
    zone: str = ""
    readable: bool = True

    @property
    def cpu_only(self) -> bool:
        """Whether it asks for no GPU and no MIG slice."""
        return not self.gpus and not self.mig

    def fits_alone(self, node: FakeGpuNode) -> bool:
        """Whether ``node``, empty, could hold this pod."""
        if not self.readable:
            return False
        labels = dict(node.labels)
        if self.zone and labels.get(LABEL_ZONE) != self.zone:
            return False
        if self.cpu_milli > node.cpu * 1000 or self.memory_mib > node.memory_gib * 1024:
            return False
        if self.mig:
            return dict(node.mig).get(self.mig, 0) >= 1
        if not self.gpus:
            return True
        if self.models and node.gpu_model not in self.models:
            return False
        return self.gpus <= node.gpus and self.gpu_memory_mib <= node.gpu_memory_mib

    def fits_somewhere(self, nodes: Sequence[FakeGpuNode]) -> bool:
        """Whether any of ``nodes``, empty, could hold this pod."""
        return any(self.fits_alone(node) for node in nodes)


def _ask(rng: random.Random) -> Ask:
    """One random request; about one pod in eight can never fit, one in forty is unreadable."""
    roll = rng.random()
    memory = rng.choice((128, 256, 512, 1024, 2048))
    zone = rng.choice(("", "", "", "a", "b"))  # zone c has no GPU: only CPU pods go there
    if roll < 0.30:
        zone = rng.choice(("", "", "a", "b", "c"))
        return Ask(rng.choice((100, 250, 500, 1000, 2000)), memory, zone=zone)
    models = rng.choice((frozenset(), frozenset(), frozenset({"H100"}), frozenset({"A100"})))
    if roll < 0.52:
        gpus = rng.choice((1, 1, 2, 3, 4, 8))
        return Ask(rng.choice((500, 1000, 2000)), memory, gpus=gpus, models=models, zone=zone)
    if roll < 0.72:
        return Ask(
            rng.choice((100, 250, 500)),
            memory,
            gpus=rng.choice((1, 1, 1, 2)),
            gpu_memory_mib=rng.choice((2048, 8192, 20000, 40000)),
            cores=rng.choice((0, 10, 25, 50, 100)),
            models=models,
            zone=zone,
        )
    if roll < 0.85:
        mig = rng.choice(("1g.10gb", "3g.40gb"))
        return Ask(rng.choice((100, 500)), memory, mig=mig, zone=rng.choice(("", "b")))
    if roll < 0.975:
        return rng.choice(
            (
                Ask(rng.choice((100_000, 200_000)), memory, gpus=3),  # more CPU than any node
                Ask(1000, 2048 * 1024, gpus=1),  # more memory than any node
                Ask(1000, memory, gpus=16),  # more GPUs than any node
                Ask(1000, memory, gpus=1, models=frozenset({"B200"})),  # a model no node has
                Ask(500, memory, zone="nowhere"),  # a selector no node matches
                Ask(500, memory, mig="7g.80gb"),  # a MIG profile no node offers
                Ask(40_000, memory, gpus=4, models=frozenset({"A100"})),  # CPU of no A100 node
            )
        )
    return Ask(500, memory, gpus=1, cores=150, readable=False)


def _manifest(
    name: str,
    ask: Ask,
    selector: dict[str, str],
    rng: random.Random,
    priority_class: str,
    labels: dict[str, str],
) -> Json:
    limits: dict[str, str] = {}
    if ask.gpus:
        limits["gpupool.io/gpu"] = str(ask.gpus)
    if ask.gpu_memory_mib:
        limits["gpupool.io/gpu-memory"] = str(ask.gpu_memory_mib)
    if ask.cores:
        limits["gpupool.io/gpu-cores"] = str(ask.cores)
    if ask.mig:
        limits[f"gpupool.io/mig-{ask.mig}"] = "1"
    annotations = {"gpupool.io/expected-runtime": str(rng.choice((60, 600, 3600, 36000)))}
    if ask.models:
        annotations["gpupool.io/gpu-model"] = "|".join(sorted(ask.models))
    spec: Json = {
        "schedulerName": "gpupool",
        "nodeSelector": {**selector, **({LABEL_ZONE: ask.zone} if ask.zone else {})},
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/cuda:latest",
                "resources": {
                    "limits": limits,
                    "requests": {"cpu": f"{ask.cpu_milli}m", "memory": f"{ask.memory_mib}Mi"},
                },
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {key: value for key, value in labels.items() if value},
            "annotations": annotations,
        },
        "spec": spec,
    }


def fuzz_pods(
    seed: int,
    count: int,
    selector: dict[str, str],
    *,
    priority_classes: Sequence[str] = (),
    queues: Sequence[str] = (),
    classes: Sequence[str] = ("training", "dev", "inference"),
) -> list[tuple[Json, Ask]]:
    """``count`` pod manifests named ``p000``..., each with what it asks; the same for a seed.

    Args:
        seed: The generator's seed.
        count: How many pods.
        selector: Labels every pod selects (the test's nodes).
        priority_classes: PriorityClass names to draw from (or none).
        queues: ``gpupool.io/queue`` labels to draw from (or none).
        classes: ``gpupool.io/class`` labels to draw from.
    """
    rng = random.Random(seed)
    pods = []
    for index in range(count):
        ask = _ask(rng)
        manifest = _manifest(
            f"p{index:03d}",
            ask,
            selector,
            rng,
            priority_class=rng.choice(("", *priority_classes)),
            labels={
                "gpupool.io/class": rng.choice(("", *classes)),
                "gpupool.io/queue": rng.choice(("", *queues)),
            },
        )
        pods.append((manifest, ask))
    return pods
