"""Why a pending pod waits and what would have to free up: ``gpupool explain POD``.

The scheduler's message already counts the nodes per reason; what a user asks next is "what
would it take": for every node the scheduler could ever place the pod on (one of the pools it is
routed to, a GPU model it allows, its selector, affinity and tolerations, ready and not cordoned:
:func:`~gpupool.scheduling.candidates.candidate_nodes`, the engine's own filters) that would hold
it if empty (enough GPUs of its size, MIG slices of its profile, CPU, memory and every other
resource it asks for), the shares still to free on the GPUs closest to fitting, and who holds
them. Computed from the snapshot with numpy, without touching it, so an explanation can never
change a placement.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpupool.api.model import Explanation, FreeUp
from gpupool.api.view import ClusterView, Waiting, pending
from gpupool.core.model import PodSpec, RequestKind
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.workload import Workload
from gpupool.scheduling.candidates import candidate_nodes, could_hold

CLOSEST = 3
"""How many candidate nodes an explanation lists."""


class NotPendingError(LookupError):
    """The pod named is not pending (placed, unknown, or another scheduler's)."""


def _free_up(snapshot: ClusterSnapshot, spec: PodSpec, row: int, view: ClusterView) -> FreeUp:
    gpus = int(snapshot.gpu_count[row])
    milli_need = spec.gpu_milli
    memory_need = np.where(
        spec.kind is RequestKind.WHOLE,
        snapshot.gpu_memory_capacity[row, :gpus],
        spec.gpu_memory_mib,
    )
    milli_short = np.maximum(milli_need - snapshot.gpu_free[row, :gpus], 0)
    memory_short = np.maximum(memory_need - snapshot.gpu_memory_free[row, :gpus], 0)
    # the GPUs closest to fitting: least compute to free, then least memory
    order = np.lexsort((memory_short, milli_short))[: spec.gpu_count]
    chosen = sorted(int(g) for g in order)
    holders = sorted(
        view.pod_info(pod_id).key
        for pod_id in snapshot.pods_on_node[row]
        if set(snapshot.allocations[pod_id].gpus) & set(chosen)
    )
    return FreeUp(
        node=snapshot.node_names[row],
        gpus=chosen,
        milli_short=int(milli_short[order].sum()),
        memory_short_mib=int(memory_short[order].sum()),
        cpu_short_milli=max(spec.cpu_milli - int(snapshot.cpu_free[row]), 0),
        memory_short_node_mib=max(spec.memory_mib - int(snapshot.memory_free[row]), 0),
        holders=holders,
    )


def _could_fit(
    snapshot: ClusterSnapshot, policy: ClusterPolicy | None, waiting: Waiting
) -> npt.NDArray[np.bool_]:
    """Candidate nodes that could hold the pod if nothing else ran there."""
    spec = waiting.spec
    if spec is None:
        return np.zeros(snapshot.size, dtype=bool)
    fits = could_hold(snapshot, spec)
    workload = waiting.workload or Workload(pod=spec)
    return fits & candidate_nodes(snapshot, policy, workload)


def explain(view: ClusterView, pod: str) -> Explanation:
    """Explain the pending pod ``pod`` (``namespace/name``).

    Raises:
        NotPendingError: No pending pod has that name.
    """
    waiting = pending(view)
    found = next((p for p in waiting if p.pod == pod), None)
    if found is None:
        raise NotPendingError(f"pod {pod!r} is not pending")
    entry = next(w for w in view.waiting() if w.info.key == pod)
    spec = entry.spec
    snapshot = view.snapshot()
    if snapshot is None:
        return Explanation(
            pending=found,
            pending_total=len(waiting),
            nodes_total=0,
            nodes_could_fit=0,
            closest=[],
            consolidation=entry.consolidation,
        )
    fitting = _could_fit(snapshot, view.policy(), entry)
    candidates: list[FreeUp] = []
    if spec is not None and spec.kind in (RequestKind.WHOLE, RequestKind.SHARE):
        candidates = [_free_up(snapshot, spec, int(row), view) for row in np.flatnonzero(fitting)]
        candidates.sort(
            key=lambda c: (
                c.milli_short,
                c.memory_short_mib,
                c.cpu_short_milli,
                c.memory_short_node_mib,
                c.node,
            )
        )
    return Explanation(
        pending=found,
        pending_total=len(waiting),
        nodes_total=snapshot.size,
        nodes_could_fit=int(fitting.sum()),
        closest=candidates[:CLOSEST],
        consolidation=entry.consolidation,
    )
