"""GPUPool and GPUQueue objects in, one :class:`~gpupool.policy.spec.PolicyConfig` out.

Two informers keep the cluster's pools and queues; :func:`compile_config` turns their specs into
the policy core's values with :func:`gpupool.policy.config.parse_objects`, the parser the
simulator, the node agent, governance and the webhook use too, so a field means the same in all
of them and an error names the same path.

The API server has validated every object already, but a scheduler must never stop scheduling
because of one object: each object is parsed on its own, and one that cannot be used (a quota
naming a pool that does not exist yet, a pool called ``default``) is left out, logged once, and
reported in its status (:mod:`gpupool.kube.policy.status`), while everything else keeps working.
A namespace that several queues list is not an error: the pod's queue label chooses, see
:func:`gpupool.policy.membership.pod_queue`.

When the CRDs are not installed, there is nothing to watch: the source says so (``absent``),
counts as synced with no pools and no queues (one implicit pool, one default queue, gpupool as it
was before pools existed) and looks again every :data:`ABSENT_RECHECK` seconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

import httpx2

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.client.informer import Informer
from gpupool.kube.objects.records import PolicyObjectRecord
from gpupool.policy.config import ObjectProblems, parse_objects
from gpupool.policy.spec import PolicyConfig

log = logging.getLogger(__name__)

GROUP_PATH = "/apis/gpupool.io/v1alpha1"
POOLS_PATH = f"{GROUP_PATH}/gpupools"
QUEUES_PATH = f"{GROUP_PATH}/gpuqueues"
ABSENT_RECHECK = 15.0
"""Seconds between looks for CRDs that were not installed."""


def _object(record: PolicyObjectRecord) -> dict[str, Any]:
    return {"metadata": {"name": record.metadata.name}, "spec": record.spec}


def compile_config(
    pools: Iterable[PolicyObjectRecord], queues: Iterable[PolicyObjectRecord]
) -> tuple[PolicyConfig, ObjectProblems]:
    """The usable pools and queues, and why each unusable one was left out.

    Args:
        pools: GPUPool records.
        queues: GPUQueue records.

    Returns:
        The config (objects in name order) and, per ``(kind, name)``, the parser's message
        naming the field of every object left out.
    """
    return parse_objects(map(_object, pools), map(_object, queues))


class PolicySource:
    """The GPUPool and GPUQueue informers and the config compiled from them.

    Args:
        api: The API port.
        on_change: Called after any pool or queue changed (the config is recompiled lazily).
    """

    def __init__(self, api: KubeAPI, on_change: Callable[[], None]) -> None:
        self.api = api
        self.on_change = on_change
        self.pools = Informer(api, POOLS_PATH, PolicyObjectRecord, self._changed)
        self.queues = Informer(api, QUEUES_PATH, PolicyObjectRecord, self._changed)
        self.absent = asyncio.Event()
        self.problems: dict[tuple[str, str], str] = {}
        self._config: PolicyConfig | None = None

    @property
    def synced(self) -> bool:
        """Whether both kinds were listed once (or their CRDs are not installed)."""
        return self.absent.is_set() or (self.pools.synced.is_set() and self.queues.synced.is_set())

    def _changed(self, kind: str, record: PolicyObjectRecord) -> None:
        self._config = None
        self.on_change()

    @property
    def config(self) -> PolicyConfig:
        """The current pools and queues (compiled once per change; problems logged once)."""
        if self._config is None:
            self._config, problems = compile_config(
                self.pools.store.values(), self.queues.store.values()
            )
            for key, message in problems.items():
                if self.problems.get(key) != message:
                    log.error("%s %s left out of the policy: %s", *key, message)
            self.problems = problems
        return self._config

    async def wait_synced(self) -> None:
        """Return once :attr:`synced` holds."""
        while not self.synced:
            await asyncio.sleep(0.05)

    async def resync(self) -> None:
        """Relist both kinds (a new term as leader), unless their CRDs are absent."""
        if not self.absent.is_set():
            await asyncio.gather(self.pools.resync(), self.queues.resync())

    async def run(self) -> None:
        """Watch both kinds until cancelled; without the CRDs, look for them now and then."""
        while True:
            try:
                await self.api.get(POOLS_PATH, {"limit": "1"})
                await self.api.get(QUEUES_PATH, {"limit": "1"})
            except ApiError as error:
                if error.status != 404:  # 403: without its quotas the scheduler must not admit
                    log.error("GPUPool/GPUQueue cannot be read: %s; retrying", error)
                    await asyncio.sleep(1.0)
                    continue
                if not self.absent.is_set():
                    log.info("GPUPool/GPUQueue CRDs not installed: one pool, one queue")
                    self.absent.set()
                    self.on_change()
                await asyncio.sleep(ABSENT_RECHECK)
                continue
            except (OSError, httpx2.HTTPError) as error:  # the API server is away: ask again
                log.warning("GPUPool/GPUQueue lookup: %s; retrying", error)
                await asyncio.sleep(1.0)
                continue
            if self.absent.is_set():
                self.absent.clear()
                self._config = None
            await asyncio.gather(self.pools.run(), self.queues.run())
