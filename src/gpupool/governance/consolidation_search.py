"""The what-ifs of consolidation: the fewest moves that make room on a node, and where they land.

Split from :mod:`gpupool.governance.consolidation` (which decides whether a plan is made and
pays): this module only asks the snapshot. Every function leaves the snapshot as it found it.

* :func:`fewest_moves`: on one node, movable pods are released GPU by GPU until the waiting pod
  fits, those on the GPUs with the fewest holders first and GPUs an immovable pod holds last (a
  GPU that one of them holds can never be emptied, so releasing its other holders frees room a
  whole-GPU pod cannot use); then every move the pod can do without is put back, costliest
  first. Greedy, not exhaustive: emptying the least crowded GPUs first is what makes a whole GPU
  with the fewest evictions, and the put-back pass drops what an early choice took needlessly.
* :func:`landings`: with the waiting pod bound where the moves make room, each moved pod must
  fit again on another node of its pool (best fit: the node with the least free GPU compute that
  holds it), largest first. A plan whose moved pods have nowhere to go would be a preemption
  under another name, so the caller refuses it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from gpupool.core.filtering import admissible, fits_on_node
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import Allocation, BoolArray, ClusterSnapshot
from gpupool.policy.workload import Running
from gpupool.scheduling.gpu_choice import best_fit_gpus


def demand_milli(pod: PodSpec) -> int:
    """GPU compute a pod asks for in all, in milli-GPU."""
    return pod.gpu_count * pod.gpu_milli


def fewest_moves(
    snapshot: ClusterSnapshot,
    pod: PodSpec,
    node: int,
    movable: Sequence[Running],
    cost: Callable[[Running], float],
) -> tuple[Running, ...] | None:
    """The movable pods of ``node`` whose departure lets ``pod`` fit there; ``None``: none do.

    ``cost`` is what a move loses (the put-back pass keeps the costliest moves out first).
    """
    holders: Counter[int] = Counter()
    blocked: Counter[int] = Counter()
    names = {r.workload.name for r in movable}
    for name in snapshot.pods_on_node[node]:
        for gpu in snapshot.allocations[name].gpus:
            holders[gpu] += 1
            blocked[gpu] += name not in names

    def order(running: Running) -> tuple[int, int, int, str]:
        gpus = snapshot.allocations[running.workload.name].gpus
        return (
            sum(blocked[g] for g in gpus),
            sum(holders[g] for g in gpus),
            -running.units,
            running.workload.name,
        )

    released: dict[str, tuple[Running, Allocation]] = {}
    try:
        for running in sorted(movable, key=order):
            released[running.workload.name] = (running, snapshot.release(running.workload.name))
            if fits_on_node(snapshot, pod, node):
                break
        else:
            return None
        for name, (_, allocation) in sorted(released.items(), key=lambda item: -cost(item[1][0])):
            _put_back(snapshot, allocation)
            if fits_on_node(snapshot, pod, node):
                del released[name]  # the pod fits with it there: no need to move it
            else:
                snapshot.release(name)
        return tuple(sorted((r for r, _ in released.values()), key=lambda r: r.workload.name))
    finally:
        for _, allocation in released.values():
            _put_back(snapshot, allocation)


def landings(
    snapshot: ClusterSnapshot,
    placed: tuple[PodSpec, int],
    moves: Sequence[Running],
    pool_nodes: Sequence[BoolArray],
    kept_off: BoolArray,
    keep: bool = False,
) -> dict[str, int] | None:
    """Where each moved pod fits again once the waiting pod holds its place (``None``: nowhere).

    Args:
        snapshot: The cluster.
        placed: The waiting pod and its node.
        moves: The pods moved off that node.
        pool_nodes: Per pool index, the pool's nodes.
        kept_off: Nodes a moved pod may not count on (nominated or reserved for others).
        keep: Leave the plan applied (the caller's working copy then sees it); restored
            otherwise, and always when a pod fits nowhere.
    """
    pod, node = placed
    restore = snapshot.simulate_removal(r.workload.name for r in moves)
    bound: list[str] = []
    found: dict[str, int] = {}
    complete = False
    try:
        snapshot.bind(pod, node, best_fit_gpus(snapshot, pod, node))
        bound.append(pod.name)
        for running in sorted(moves, key=lambda r: (-r.units, r.workload.name)):
            moved = running.workload.pod
            allowed = pool_nodes[running.pool] & ~kept_off
            allowed[node] = False
            target = _best_fit_node(snapshot, moved, allowed)
            if target is None:
                return None
            snapshot.bind(moved, target, best_fit_gpus(snapshot, moved, target))
            bound.append(moved.name)
            found[moved.name] = target
        complete = True
        return found
    finally:
        if not (complete and keep):
            for name in reversed(bound):
                snapshot.release(name)
            restore()


def _best_fit_node(snapshot: ClusterSnapshot, pod: PodSpec, allowed: BoolArray) -> int | None:
    """The allowed node with the least free GPU compute that ``pod`` fits on now."""
    usable = allowed & admissible(snapshot, pod) & (snapshot.gpu_free_total >= demand_milli(pod))
    rows = np.flatnonzero(usable)
    for row in rows[np.argsort(snapshot.gpu_free_total[rows], kind="stable")].tolist():
        if fits_on_node(snapshot, pod, row):
            return int(row)
    return None


def _put_back(snapshot: ClusterSnapshot, allocation: Allocation) -> None:
    snapshot.bind(allocation.pod, allocation.node, allocation.gpus, running=True)
