"""What DRA claims hold in the scheduler's snapshot, kept beside what pods hold.

A claim allocated with gpupool's devices holds its GPUs (or MIG instance) under its own snapshot
name, ``claim:<uid>`` (:mod:`gpupool.kube.scheduler.dra.claims`), from the moment the scheduler
decides for its first pod (assumed) until its status no longer allocates them:

* **assumed**: decided, its write in flight; held, and the allocation kept in the claim book so
  no other claim is given the same MIG instance;
* **confirmed**: the watch shows gpupool's results in ``status.allocation``;
* **released**: the claim is gone or its allocation cleared (or the write failed).

After a restart every claim's ``status.allocation`` is held before any pod, like trusted pod
records, so capacity a claim was given is never handed out again.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from gpupool.core.decisions import Bind
from gpupool.core.snapshot import AllocationError
from gpupool.kube.objects.dra.records import ResourceClaim
from gpupool.kube.objects.signing import CLAIM_DOMAIN
from gpupool.kube.scheduler.dra.claims import (
    CLAIM_KEY,
    ClaimBind,
    ClaimPlacement,
    claim_key,
    gpupool_results,
    without_gpus,
)

if TYPE_CHECKING:
    from gpupool.kube.scheduler.state import ClusterState

log = logging.getLogger(__name__)


class ClaimHolder:
    """The claim side of :class:`ClusterState`: holding, confirming and releasing claims."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def reconcile(self, key: str) -> None:
        """A claim holds its GPUs while its status (or our write in flight) allocates them."""
        state = self.state
        uid = key.removeprefix(CLAIM_KEY)
        claim = state.claims.by_uid.get(uid)
        held = state.snapshot.allocations.get(key) if state.snapshot else None
        allocated = claim is not None and bool(gpupool_results(claim))
        if key in state.assumed:
            if claim is not None and not allocated and uid in state.claims.assumed:
                return  # the write is in flight
            state.assumed.discard(key)
            if allocated and held is not None:
                return  # the watch shows the allocation we wrote
            state._release(key)
            held = None
        if claim is None or not allocated:
            if held is not None:
                state._release(key)
            return
        if held is None:
            self.hold(claim)

    def hold(self, claim: ResourceClaim) -> None:
        """Hold what an allocated claim's status says (nothing for a claim not allocated here)."""
        state = self.state
        snapshot = state.snapshot
        found = state.claims.held(claim, snapshot, state.uuids) if snapshot else None
        if found is None:
            return
        signer = state.signer.for_domain(CLAIM_DOMAIN) if state.signer is not None else None
        if not state.claims.trusted(claim, signer):
            log.warning("claim %s: allocation without a valid record, held as written", claim.key)
        spec, row, gpus = found
        state._bind_displacing(spec, row, gpus, claim.key)

    def assume(self, decision: Bind, placement: ClaimPlacement) -> None:
        """Hold a claim pod's decision: the claim its GPUs (unless allocated), the pod the rest.

        Raises:
            AllocationError: It does not fit, the claim is being allocated on another node, or
                its devices changed since the pod was translated.
        """
        state = self.state
        assert state.snapshot is not None
        uid = decision.pod.name
        plan = placement.plan
        key = claim_key(plan.claim.metadata.uid)
        held = state.snapshot.allocations.get(key)
        if held is not None:  # another pod of this cycle got the claim first: join it
            if held.node != decision.node:
                raise AllocationError(f"claim {plan.claim.key} is being allocated on another node")
            plan = replace(plan, request=None, eligible=None)
        allocation = None
        if plan.request is not None:
            node = decision.node_name
            try:
                allocation = state.claims.allocation(plan, node, decision.gpus, state.uuids[node])
            except KeyError as error:
                raise AllocationError(str(error)) from None
            gpus_only = replace(decision.pod, name=key, cpu_milli=0, memory_mib=0, constraints=None)
            state._assume(key, gpus_only, decision.node, decision.gpus)
            state.claims.assumed[plan.claim.metadata.uid] = allocation
        pod_bind = replace(decision, pod=without_gpus(decision.pod), gpus=())
        try:
            state._assume(uid, pod_bind.pod, decision.node, ())
        except AllocationError:
            self.forget_claim(plan.claim.metadata.uid)
            raise
        state.claim_binds[uid] = ClaimBind(plan, allocation, pod_bind)

    def forget(self, uid: str) -> None:
        """A claim pod's bind failed: drop the claim's assumed allocation too."""
        claim_bind = self.state.claim_binds.pop(uid, None)
        if claim_bind is not None and claim_bind.allocation is not None:
            self.forget_claim(claim_bind.plan.claim.metadata.uid)

    def forget_claim(self, claim_uid: str) -> None:
        """Drop an assumed allocation of a claim (its status decides from now on)."""
        self.state.claims.assumed.pop(claim_uid, None)
        self.state.forget(claim_key(claim_uid))
