"""FGD's remembered GPU choice is used only on the state it was found on.

FGD finds the GPU for a share while scoring and remembers it for ``select_gpus``. The scheduler
skips scoring when one node is feasible, so a pod scored earlier (on a what-if, or before other
pods took room) would get the GPU remembered then: the simulator with 16 reservations per pool
was handed a GPU with 200 milli free for a 600-milli share, and the snapshot refused the bind.
"""

from __future__ import annotations

from gpupool.core.decisions import Bind
from gpupool.core.filtering import filter_nodes
from gpupool.core.framework import Scheduler
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.scheduling.policies.fgd import FGDPolicy
from gpupool.scheduling.workload import TargetWorkload


def _setup() -> tuple[ClusterSnapshot, FGDPolicy, PodSpec]:
    snapshot = ClusterSnapshot([NodeSpec("n0", 64_000, 256_000, 2, "A100")])
    snapshot.bind(PodSpec("held", 100, 100, 1, 400), 0, (1,))  # GPU 1 the tighter fit
    workload = TargetWorkload.from_counts({(1000, 1024, 1, ""): 1}, coverage=1.0)
    return snapshot, FGDPolicy(workload), PodSpec("share", 1000, 1024, 1, 600)


def _fill(snapshot: ClusterSnapshot, gpu: int) -> None:
    """Leave ``gpu`` of node 0 too little room for the share."""
    taken = 1000 - int(snapshot.gpu_free[0, gpu])
    snapshot.bind(PodSpec(f"fill{gpu}", 100, 100, 1, 900 - taken), 0, (gpu,))


def test_a_gpu_remembered_from_scoring_is_not_reused_once_its_node_changed() -> None:
    snapshot, policy, share = _setup()
    policy.score(snapshot, share, filter_nodes(snapshot, share).mask)
    (chosen,) = policy.select_gpus(snapshot, share, 0)
    _fill(snapshot, chosen)
    assert policy.select_gpus(snapshot, share, 0) == (1 - chosen,)
    decision = Scheduler(policy).schedule(snapshot, share)  # one feasible node: no scoring
    assert isinstance(decision, Bind)
    assert decision.gpus == (1 - chosen,)
    snapshot.bind(share, decision.node, decision.gpus)  # the snapshot accepts it


def test_a_gpu_remembered_on_a_copy_is_not_used_on_the_original() -> None:
    snapshot, policy, share = _setup()
    what_if = snapshot.copy()
    what_if.release("held")
    policy.score(what_if, share, filter_nodes(what_if, share).mask)
    (chosen,) = policy.select_gpus(what_if, share, 0)
    _fill(snapshot, chosen)
    assert snapshot.node_gen[0] == what_if.node_gen[0]  # the same generation, other contents
    assert policy.select_gpus(snapshot, share, 0) == (1 - chosen,)
