"""The hand-off: the right pod's GPUs and caps to the right container, whatever the order.

The kubelet's ``Allocate`` carries device IDs, not the pod. Peers that guess the pod there
("the next pending pod on this node with a matching request") swap two pods' GPUs and limits
when the kubelet admits them in another order or at the same time (HAMi#3096, #781). gpupool
never guesses:

1. ``Allocate(ids)`` answers only a fresh random *token*, as a CDI device name and nothing
   else: no GPU, no caps. Any earlier token that shares a device ID with ``ids`` is deleted with
   its spec first, since the kubelet re-gives a device only once its previous holder is gone.
   So a device ID maps to at most one token, as it maps to at most one live container.
2. ``PreStartContainer(ids)`` (the kubelet calls it before creating the container, and must
   wait for it) asks the kubelet's PodResources API which container holds exactly ``ids``.
   That is the kubelet's own record of the allocation it just made, so it names the container
   being started, never another. The agent reads that pod from the API server, verifies the
   allocation record's signature with the scheduler's public key (a record anyone else wrote,
   even one that agrees with the pod, is refused with a Warning Event on the pod), checks the
   record (:mod:`gpupool.agent.grants`) and the GPUs' capacity against the other live grants,
   and only then writes the token's CDI spec with that pod's GPUs and caps.
3. The runtime resolves the token when it creates the container. A refused container has no
   spec: it fails to start with the agent's message, it never runs with a guessed GPU.

The token map is persisted (a restarted agent keeps serving PreStart for containers that
restart) and reconciled with PodResources: a token whose devices no container has held for
:data:`COLLECT_AFTER_SECONDS` is removed with its spec.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from gpupool.agent import checkpoint, mps
from gpupool.agent.cdi import remove_spec, spec_tokens, write_spec
from gpupool.agent.grants import (
    NO_OVERCOMMIT,
    ContainerGrant,
    Grant,
    HandoffRefusedError,
    NodeRefusedError,
    Overcommit,
    check_capacity,
    gpu_capacities,
    grant_for,
)
from gpupool.agent.isolation import IsolationConfig, host_checked_edits
from gpupool.agent.nvml import GpuDevice
from gpupool.agent.podresources import HeldDevices, PodResourcesSource
from gpupool.agent.refusals import NodeRefusals
from gpupool.kube.objects.record_check import signature_problem
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.signing import RecordVerifier

log = logging.getLogger(__name__)

STATE_FILE = "handoff.json"
COLLECT_AFTER_SECONDS = 300.0
"""How long no container may hold a token's devices before the token is collected.

Not zero: a restarted kubelet restores its device assignments from its checkpoint at once but
lists a pod in PodResources only once it has read the pod from the API server again, so for a
few seconds after a kubelet restart every running container looks gone. Collecting then would
delete the specs of running containers, which could not restart afterwards. The same delay
covers a token the kubelet has not recorded yet (between Allocate and its podDevices write).
"""


class PodSource(Protocol):
    """Reads a pod by name (the API server in production)."""

    async def get(self, namespace: str, name: str) -> PodRecord | None:
        """The pod, or None if it does not exist."""


class KeySource(Protocol):
    """The scheduler's public key (its ConfigMap in production)."""

    async def verifier(self, *, fresh: bool = False) -> RecordVerifier:
        """The key; ``fresh`` reads it again (it may have been rotated).

        Raises:
            HandoffRefusedError: The key cannot be read: nothing can be verified.
        """
        ...


class UntrustedRecordError(HandoffRefusedError):
    """The pod's allocation record is not signed by the scheduler (reported on the pod too)."""

    def __init__(self, message: str, pod: PodRecord) -> None:
        super().__init__(message)
        self.pod = pod


Report = Callable[[PodRecord, str], Awaitable[None]]
"""Writes a Warning Event about a refused pod (the reason is ``AllocationNotTrusted``)."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One ``Allocate`` answer.

    Attributes:
        resource: The extended resource.
        device_ids: The IDs it was for (sorted).
        allocated_at: When (epoch seconds).
        grant: What PreStartContainer gave, once it did.
    """

    resource: str
    device_ids: tuple[str, ...]
    allocated_at: float
    grant: ContainerGrant | None = None


@dataclass(slots=True)
class HandoffConfig:
    """Where the hand-off keeps its files and how it isolates.

    Attributes:
        node: This node's name.
        cdi_dir: The runtime's CDI spec folder (``/var/run/cdi``).
        state_dir: The agent's own state folder (``/var/lib/gpupool/agent``).
        isolation: Isolation mode and paths.
        collect_after: Seconds a token's devices must be unheld before it is collected.
    """

    node: str
    cdi_dir: Path
    state_dir: Path
    isolation: IsolationConfig = field(default_factory=IsolationConfig)
    collect_after: float = COLLECT_AFTER_SECONDS


class Handoff:
    """Tokens from Allocate, grants at PreStartContainer, and their collection.

    Args:
        config: Paths and isolation.
        pods: Where pods are read.
        kubelet: The kubelet's PodResources API.
        inventory: The node's current GPUs (called at every PreStart).
        keys: The scheduler's public key, to verify allocation records with.
        report: Writes the Event on a pod whose record is refused as not the scheduler's.
        clock: Epoch seconds (injected for tests).
        other_grants: The DRA path's prepared claims (their GPUs count in the capacity check).
    """

    def __init__(
        self,
        config: HandoffConfig,
        pods: PodSource,
        kubelet: PodResourcesSource,
        inventory: Callable[[], tuple[GpuDevice, ...]],
        keys: KeySource,
        report: Report | None = None,
        clock: Callable[[], float] = time.time,
        other_grants: Callable[[], Iterable[Grant]] = tuple,
        overcommit: Callable[[], Overcommit] = lambda: NO_OVERCOMMIT,
        refusals: NodeRefusals | None = None,
    ) -> None:
        self.config = config
        self._other_grants = other_grants
        self._overcommit = overcommit
        self.refusals = refusals if refusals is not None else NodeRefusals(clock)
        self._pods = pods
        self._keys = keys
        self._report = report
        self._kubelet = kubelet
        self._inventory = inventory
        self._clock = clock
        self._lock = asyncio.Lock()
        self._unheld_since: dict[str, float] = {}
        self.tokens: dict[str, TokenEntry] = self._load()

    # --- persistence -------------------------------------------------------------------

    def _state_path(self) -> Path:
        return self.config.state_dir / STATE_FILE

    def _load(self) -> dict[str, TokenEntry]:
        # Never start from a guess: without the map, PreStart refuses until the kubelet
        # re-allocates, which is safe.
        return checkpoint.load(self._state_path(), dict[str, TokenEntry], "tokens")

    def _save(self) -> None:
        checkpoint.save(self._state_path(), self.tokens)

    def _drop(self, tokens: Iterable[str]) -> None:
        for token in list(tokens):
            self.tokens.pop(token, None)
            remove_spec(self.config.cdi_dir, token)

    # --- the kubelet's calls -----------------------------------------------------------

    async def allocate(self, resource: str, device_ids: Iterable[str]) -> str:
        """A fresh token for one container's devices (Allocate); no GPU is chosen here."""
        ids = tuple(sorted(device_ids))
        async with self._lock:
            self._drop(
                token
                for token, entry in self.tokens.items()
                if entry.resource == resource and set(entry.device_ids) & set(ids)
            )
            token = uuid.uuid4().hex
            self.tokens[token] = TokenEntry(resource, ids, self._clock())
            self._save()
        return token

    async def prestart(self, resource: str, device_ids: Iterable[str]) -> ContainerGrant:
        """Resolve the container holding ``device_ids``, check, and write its CDI spec.

        Raises:
            HandoffRefusedError: The container must not start; the message says why.
        """
        ids = tuple(sorted(device_ids))
        async with self._lock:
            token = next(
                (
                    t
                    for t, e in reversed(self.tokens.items())
                    if e.resource == resource and e.device_ids == ids
                ),
                None,
            )
            if token is None:
                raise HandoffRefusedError(
                    f"{resource} devices {', '.join(ids)}: no Allocate answer for exactly these "
                    "devices is known to this agent"
                )
            try:
                grant = await self._resolve(resource, ids, token)
            except UntrustedRecordError as error:
                remove_spec(self.config.cdi_dir, token)
                if self._report is not None:
                    await self._report(error.pod, str(error))
                raise
            except HandoffRefusedError:
                remove_spec(self.config.cdi_dir, token)
                raise
            self.tokens[token] = replace(self.tokens[token], grant=grant)
            self._save()
            return grant

    async def _resolve(self, resource: str, ids: tuple[str, ...], token: str) -> ContainerGrant:
        held = await self._kubelet.held()
        self._collect(held, keep=token)
        live = {(h.resource, h.device_ids) for h in held}
        holders = [h for h in held if h.resource == resource and h.device_ids == frozenset(ids)]
        if len(holders) != 1:
            raise HandoffRefusedError(
                f"{resource} devices {', '.join(ids)}: the kubelet reports "
                f"{len(holders)} containers holding exactly these devices, expected 1"
            )
        holder = holders[0]
        pod = await self._pods.get(holder.namespace, holder.pod)
        if pod is None:
            raise HandoffRefusedError(
                f"pod {holder.namespace}/{holder.pod} not found in the API server"
            )
        await self._verify(pod, holder.container)
        grant = grant_for(pod, holder.container, resource, ids, self.config.node, self._inventory())
        earlier = self.tokens[token].grant
        if earlier is not None and earlier.pod_uid != grant.pod_uid:
            # PodResources names pods, not UIDs: a pod force-deleted while its container still
            # runs, then re-created under the same name, must not lend the old container the
            # new pod's GPUs when it restarts.
            raise HandoffRefusedError(
                f"pod {grant.namespace}/{grant.pod} container {grant.container!r}: these devices "
                f"were given to pod UID {earlier.pod_uid}, but the pod of that name is now "
                f"{grant.pod_uid} (deleted and re-created)"
            )
        try:
            self._check_capacity(grant, token, live)
            edits = host_checked_edits(grant, self.config.isolation)
        except NodeRefusedError as refusal:
            self.refusals.refused(grant, str(refusal))
            raise
        self.refusals.started(grant)
        mps.publish(self.config.isolation, [*self._all_grants(), grant], self._inventory())
        write_spec(self.config.cdi_dir, token, edits)
        log.info(
            "handoff %s: pod %s/%s container %s gets %s",
            token,
            grant.namespace,
            grant.pod,
            grant.container,
            ", ".join(f"{g.uuid} (milli={g.milli}, memory={g.memory_mib}MiB)" for g in grant.gpus),
        )
        return grant

    async def _verify(self, pod: PodRecord, container: str) -> None:
        """Refuse a record the scheduler did not sign for this pod.

        A failure is checked once more with the key read afresh: the scheduler's key may have
        been rotated since the agent last read it, and a stale key must not refuse good pods.
        """
        problem = signature_problem(pod, await self._keys.verifier())
        if problem is not None:
            problem = signature_problem(pod, await self._keys.verifier(fresh=True))
        if problem is not None:
            raise UntrustedRecordError(
                f"pod {pod.key} container {container!r}: {problem}; refusing to start it", pod
            )

    def _check_capacity(
        self, grant: ContainerGrant, token: str, live: set[tuple[str, frozenset[str]]]
    ) -> None:
        """Refuse a grant that, with the live grants of other pods and claims, oversubscribes.

        Live means held by a container in the kubelet's list right now, so a pod that just
        ended does not block its successor while its token waits to be collected. Claims
        prepared through DRA (``other_grants``) count while they are prepared.
        """
        others: list[Grant] = [
            entry.grant
            for other_token, entry in self.tokens.items()
            if other_token != token
            and entry.grant is not None
            and (entry.resource, frozenset(entry.device_ids)) in live
        ]
        others.extend(self._other_grants())
        check_capacity(grant, others, gpu_capacities(self._inventory(), self._overcommit()))

    # --- collection --------------------------------------------------------------------

    def _collect(self, held: list[HeldDevices], keep: str = "") -> list[str]:
        live = {(h.resource, h.device_ids) for h in held}
        now = self._clock()
        dead = []
        for token, entry in self.tokens.items():
            if token == keep or (entry.resource, frozenset(entry.device_ids)) in live:
                self._unheld_since.pop(token, None)
                continue
            since = self._unheld_since.setdefault(token, now)
            if now - since >= self.config.collect_after:
                dead.append(token)
        orphans = spec_tokens(self.config.cdi_dir) - set(self.tokens)
        self._drop([*dead, *orphans])
        for token in dead:
            self._unheld_since.pop(token, None)
        return dead

    async def reconcile(self) -> list[str]:
        """Drop tokens no container holds any more (and their specs); return them."""
        async with self._lock:  # the list must not predate a grant made meanwhile
            dead = self._collect(await self._kubelet.held())
            if dead:
                self._save()
                # the daemon's limits follow the largest share still live, down as well as up
                mps.publish(self.config.isolation, self._all_grants(), self._inventory())
            return dead

    def _all_grants(self) -> list[Grant]:
        return [*self.grants(), *self._other_grants()]

    def grants(self) -> list[ContainerGrant]:
        """The live grants (for telemetry)."""
        return [entry.grant for entry in self.tokens.values() if entry.grant is not None]
