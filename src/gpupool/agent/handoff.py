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
   being started, never another. The agent reads that pod from the API server, checks its
   allocation record (:mod:`gpupool.agent.grants`) and the GPUs' capacity against the other
   live grants, and only then writes the token's CDI spec with that pod's GPUs and caps.
3. The runtime resolves the token when it creates the container. A refused container has no
   spec: it fails to start with the agent's message, it never runs with a guessed GPU.

The token map is persisted (a restarted agent keeps serving PreStart for containers that
restart) and reconciled with PodResources: a token whose devices no container has held for
:data:`COLLECT_AFTER_SECONDS` is removed with its spec.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import msgspec

from gpupool.agent.cdi import remove_spec, spec_tokens, write_spec
from gpupool.agent.grants import ContainerGrant, HandoffRefusedError, grant_for
from gpupool.agent.isolation import IsolationConfig, edits_for
from gpupool.agent.nvml import GpuDevice
from gpupool.agent.podresources import HeldDevices, PodResourcesSource
from gpupool.kube.records import PodRecord

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
        clock: Epoch seconds (injected for tests).
    """

    def __init__(
        self,
        config: HandoffConfig,
        pods: PodSource,
        kubelet: PodResourcesSource,
        inventory: Callable[[], tuple[GpuDevice, ...]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._pods = pods
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
        path = self._state_path()
        if not path.is_file():
            return {}
        try:
            return msgspec.json.decode(path.read_bytes(), type=dict[str, TokenEntry])
        except msgspec.MsgspecError as error:
            # Never start from a guess: without the map, PreStart refuses until the kubelet
            # re-allocates, which is safe; the unreadable file is kept for a person to read.
            log.error("%s unreadable (%s); starting with no tokens", path, error)
            path.rename(path.with_suffix(".unreadable"))
            return {}

    def _save(self) -> None:
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.config.state_dir, prefix=".tmp-")
        with os.fdopen(handle, "wb") as out:
            out.write(msgspec.json.encode(self.tokens))
        os.replace(temporary, self._state_path())

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
        self._check_capacity(grant, token, live)
        write_spec(self.config.cdi_dir, token, edits_for(grant, self.config.isolation))
        log.info(
            "handoff %s: pod %s/%s container %s gets %s",
            token,
            grant.namespace,
            grant.pod,
            grant.container,
            ", ".join(f"{g.uuid} (milli={g.milli}, memory={g.memory_mib}MiB)" for g in grant.gpus),
        )
        return grant

    def _check_capacity(
        self, grant: ContainerGrant, token: str, live: set[tuple[str, frozenset[str]]]
    ) -> None:
        """Refuse a grant that, with the live grants of other pods, oversubscribes a GPU.

        Live means held by a container in the kubelet's list right now, so a pod that just
        ended does not block its successor while its token waits to be collected.
        """
        memory = {gpu.uuid: gpu.memory_mib for gpu in self._inventory()}
        for wanted in grant.gpus:
            others: dict[str, tuple[int, int, bool]] = {}
            for other_token, entry in self.tokens.items():
                other = entry.grant
                if other_token == token or other is None or other.pod_uid == grant.pod_uid:
                    continue
                if (entry.resource, frozenset(entry.device_ids)) not in live:
                    continue
                for gpu in other.gpus:
                    if gpu.uuid == wanted.uuid:
                        others[other.pod_uid] = (gpu.milli, gpu.memory_mib, gpu.exclusive)
            if not others:
                continue
            owner = f"pod {grant.namespace}/{grant.pod} container {grant.container!r}"
            if wanted.exclusive or any(exclusive for _, _, exclusive in others.values()):
                raise HandoffRefusedError(
                    f"{owner}: GPU {wanted.uuid} is exclusive but already given to "
                    f"{len(others)} other pod(s)"
                )
            milli = wanted.milli + sum(m for m, _, _ in others.values())
            used = wanted.memory_mib + sum(b for _, b, _ in others.values())
            if milli > 1000 or used > memory.get(wanted.uuid, 0):
                raise HandoffRefusedError(
                    f"{owner}: GPU {wanted.uuid} would be oversubscribed "
                    f"(compute {milli}/1000 milli, memory {used}/{memory.get(wanted.uuid, 0)} MiB)"
                )

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
            return dead

    def grants(self) -> list[ContainerGrant]:
        """The live grants (for telemetry)."""
        return [entry.grant for entry in self.tokens.values() if entry.grant is not None]
