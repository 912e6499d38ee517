"""Preparing and unpreparing claims: their CDI specs, checkpointed, idempotent.

The kubelet calls ``NodePrepareResources`` before it starts a pod that uses a claim, again for
the same claim on every retry and after its own restart, and for each pod sharing the claim;
``NodeUnprepareResources`` once no pod on the node uses it. So:

* a claim already prepared is answered from the checkpoint (its spec rewritten if it went
  missing) without reading the claim again: the answer never changes under a running pod;
* a new claim is read from the API server, checked (:func:`gpupool.agent.dra.grants.claim_grant`),
  its record's signature verified with the scheduler's public key (read again once before a
  refusal, as the device-plugin path does: the key may have been rotated), checked for capacity
  against every live grant of both paths, and only then gets its CDI spec
  ``gpupool.io/claim=<uid>``, with the same edits and caps the device-plugin path gives a pod;
* unpreparing a claim that is not prepared succeeds (the kubelet may retry after a crash);
* the prepared claims are checkpointed (atomic rename) in the agent's state folder, so a
  restarted agent answers the kubelet's retries and counts the claims' GPUs in its checks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from gpupool.agent import checkpoint, mps
from gpupool.agent.cdi import CLAIM, device_name, remove_spec, spec_path, spec_tokens, write_spec
from gpupool.agent.dra.grants import ClaimGrant, claim_grant, claim_signature_problem
from gpupool.agent.grants import (
    NO_OVERCOMMIT,
    Grant,
    HandoffRefusedError,
    NodeRefusedError,
    Overcommit,
    check_capacity,
    gpu_capacities,
)
from gpupool.agent.handoff import HandoffConfig, KeySource
from gpupool.agent.isolation import host_checked_edits
from gpupool.agent.nvml import GpuDevice
from gpupool.agent.refusals import NodeRefusals
from gpupool.kube.objects.dra.records import ResourceClaim

log = logging.getLogger(__name__)

STATE_FILE = "dra-claims.json"


class ClaimSource(Protocol):
    """Reads a ResourceClaim by name (the API server in production)."""

    async def get(self, namespace: str, name: str) -> ResourceClaim | None:
        """The claim, or None if it does not exist."""


class ClaimPreparer:
    """Prepared claims and their CDI specs.

    Args:
        config: Node name, CDI and state folders, isolation (shared with the hand-off).
        claims: Where claims are read.
        keys: The scheduler's public key, to verify claim records with.
        inventory: The node's current GPUs.
        other_grants: The device-plugin path's live grants (counted in the capacity check).
    """

    def __init__(
        self,
        config: HandoffConfig,
        claims: ClaimSource,
        keys: KeySource,
        inventory: Callable[[], tuple[GpuDevice, ...]],
        other_grants: Callable[[], Iterable[Grant]] = tuple,
        overcommit: Callable[[], Overcommit] = lambda: NO_OVERCOMMIT,
        refusals: NodeRefusals | None = None,
    ) -> None:
        self.config = config
        self._claims = claims
        self._keys = keys
        self._inventory = inventory
        self._other_grants = other_grants
        self._overcommit = overcommit
        self.refusals = refusals if refusals is not None else NodeRefusals()
        self._lock = asyncio.Lock()
        self.prepared: dict[str, ClaimGrant] = self._load()
        for orphan in spec_tokens(config.cdi_dir, CLAIM) - set(self.prepared):
            remove_spec(config.cdi_dir, orphan, CLAIM)  # written before a crash, never answered

    def _state_path(self) -> Path:
        return self.config.state_dir / STATE_FILE

    def _load(self) -> dict[str, ClaimGrant]:
        # Without the checkpoint every claim is prepared afresh from the API server: safe.
        return checkpoint.load(self._state_path(), dict[str, ClaimGrant], "prepared claims")

    def _save(self) -> None:
        checkpoint.save(self._state_path(), self.prepared)

    def grants(self) -> list[ClaimGrant]:
        """The prepared claims (their GPUs are taken while prepared)."""
        return list(self.prepared.values())

    async def prepare(self, namespace: str, uid: str, name: str) -> tuple[ClaimGrant, str]:
        """The claim's grant and its CDI device ID, preparing it if it is not yet.

        Raises:
            HandoffRefusedError: The claim must not be prepared; the message says why.
        """
        async with self._lock:
            grant = self.prepared.get(uid)
            if grant is None:
                grant = await self._prepare(namespace, uid, name)
            elif not spec_path(self.config.cdi_dir, uid, CLAIM).is_file():
                self._write(grant)
            return grant, device_name(uid, CLAIM)

    async def _prepare(self, namespace: str, uid: str, name: str) -> ClaimGrant:
        claim = await self._claims.get(namespace, name)
        if claim is None:
            raise HandoffRefusedError(f"claim {namespace}/{name} not found in the API server")
        inventory = self._inventory()
        grant = claim_grant(claim, uid, self.config.node, inventory)
        problem = claim_signature_problem(claim, await self._keys.verifier())
        if problem is not None:
            problem = claim_signature_problem(claim, await self._keys.verifier(fresh=True))
        if problem is not None:
            raise HandoffRefusedError(f"claim {claim.key}: {problem}; refusing it")
        others = [*self.prepared.values(), *self._other_grants()]
        try:
            check_capacity(grant, others, gpu_capacities(inventory, self._overcommit()))
            edits = host_checked_edits(grant, self.config.isolation)
        except NodeRefusedError as refusal:
            self.refusals.refused(grant, str(refusal))
            raise
        self.refusals.started(grant)
        mps.publish(self.config.isolation, [*others, grant], inventory)
        write_spec(self.config.cdi_dir, grant.claim_uid, edits, CLAIM)
        self.prepared[uid] = grant
        self._save()
        log.info(
            "prepared claim %s/%s: %s",
            namespace,
            name,
            ", ".join(f"{g.uuid} (milli={g.milli}, memory={g.memory_mib}MiB)" for g in grant.gpus),
        )
        return grant

    def _write(self, grant: ClaimGrant) -> None:
        edits = host_checked_edits(grant, self.config.isolation)
        write_spec(self.config.cdi_dir, grant.claim_uid, edits, CLAIM)

    async def unprepare(self, uid: str) -> bool:
        """Remove the claim's spec and checkpoint entry; False if it was not prepared."""
        async with self._lock:
            remove_spec(self.config.cdi_dir, uid, CLAIM)
            if self.prepared.pop(uid, None) is None:
                return False
            self._save()
            log.info("unprepared claim %s", uid)
            return True
