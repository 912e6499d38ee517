"""Choosing GPUs inside the chosen node.

Three rules cover the published policies (placement-benchmark.md, section 2.4):

* best fit: each share goes to the eligible GPU with the least free compute, lowest index on
  ties; for whole GPUs that is simply the first fully free GPUs by index; a pod of several GPUs
  on a node of several NVLink domains takes them from one domain when one has room (its
  collective traffic then stays on NVLink, not PCIe), the domain with the fewest usable GPUs
  left over, so whole domains stay free for larger pods; failing that (one NVLink domain, an
  NVSwitch, or none with room), from one host NUMA node by the same rule, so its host-side
  copies do not cross the socket interconnect;
* random fit: a single share goes to a uniformly random eligible GPU; whole GPUs as best fit;
* scored choice (FGD) lives with its policy.
"""

from __future__ import annotations

import numpy as np

from gpupool.core.filtering import eligible_gpus
from gpupool.core.model import MILLI_PER_GPU, PodSpec
from gpupool.core.snapshot import ClusterSnapshot, IntArray

_NEVER = np.iinfo(np.int64).max


def best_fit_gpus(snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> tuple[int, ...]:
    """The ``gpu_count`` eligible GPUs with the least free compute (stable: lowest index first)."""
    if pod.gpu_count == 0:
        return ()
    key = np.where(eligible_gpus(snapshot, pod, node), snapshot.gpu_free[node], _NEVER)
    if pod.gpu_count > 1:
        spec = snapshot.nodes[node]
        for domains in (spec.gpu_links, spec.gpu_numa):
            together = _one_domain(key, domains, pod.gpu_count) if domains else None
            if together is not None:
                return together
    order = np.argsort(key, kind="stable")[: pod.gpu_count]
    return tuple(int(i) for i in order)


def _one_domain(key: IntArray, links: tuple[int, ...], count: int) -> tuple[int, ...] | None:
    """The best-fit ``count`` GPUs of the one domain that holds them with least room left over."""
    domains = np.asarray(links, dtype=np.int64)
    usable = key[: len(domains)] != _NEVER
    best: tuple[int, int] | None = None
    for domain in np.unique(domains).tolist():
        room = int((usable & (domains == domain)).sum())
        if room >= count and (best is None or room < best[0]):
            best = (room, domain)
    if best is None:
        return None
    inside = np.where(domains == best[1], key[: len(domains)], _NEVER)
    return tuple(int(i) for i in np.argsort(inside, kind="stable")[:count])


def random_fit_gpus(
    snapshot: ClusterSnapshot, pod: PodSpec, node: int, rng: np.random.Generator
) -> tuple[int, ...]:
    """A uniformly random eligible GPU for a single share; best fit otherwise."""
    if pod.gpu_count != 1 or pod.gpu_milli >= MILLI_PER_GPU:
        return best_fit_gpus(snapshot, pod, node)
    candidates = np.flatnonzero(eligible_gpus(snapshot, pod, node))
    return (int(candidates[rng.integers(candidates.size)]),)
