"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

Every replica runs its informers (a warm standby); only the holder of the Lease schedules.

* A replica takes the Lease when it does not exist, when it is released (empty holder), or when
  its record has not changed for ``lease_duration`` as measured on *this* replica's monotonic
  clock since it last saw the record change (so clock skew between machines does not matter).
* The leader renews every ``retry_period``. If it cannot renew for ``renew_deadline`` (shorter
  than ``lease_duration``) it stops leading before anyone else may start: there is never a
  moment with two leaders acting, as long as ``renew_deadline < lease_duration``.
* Writes use the Lease's resourceVersion, so two candidates cannot both win one round (the
  loser gets 409 Conflict).
* On a clean shutdown the leader releases the Lease so a standby takes over at once.
* Where an installer owns the Lease (the Helm chart), ``create_missing`` is off: a replica
  still running after ``helm uninstall`` deleted it must not make it again outside the release,
  where it would block the next install ("invalid ownership metadata").
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from gpupool.kube.client.api import ApiError, JsonObject, KubeAPI

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    """How a replica campaigns.

    Timings are in seconds (client-go's defaults: 15 / 10 / 2); ``create_missing``: make the
    Lease when it does not exist (off: wait for the installer's).
    """

    namespace: str = "kube-system"
    name: str = "gpupool-scheduler"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    create_missing: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "lease timings: need 0 < retry_period < renew_deadline < lease_duration, got "
                f"{self.retry_period} / {self.renew_deadline} / {self.lease_duration}"
            )


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for one Lease on behalf of ``identity``."""

    def __init__(self, api: KubeAPI, identity: str, config: LeaseConfig) -> None:
        self.api = api
        self.identity = identity
        self.config = config
        self.path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{config.namespace}/leases/{config.name}"
        )
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._told_missing = False

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Campaign until elected, run ``lead()`` while leading, return when leadership ends.

        ``lead`` is cancelled if renewing fails for ``renew_deadline``; if it returns by itself
        the Lease is released.
        """
        while not await self._try_acquire():
            await asyncio.sleep(self.config.retry_period)
        log.info("%s: became leader of %s", self.identity, self.path)
        leading = asyncio.create_task(lead())
        renewing = asyncio.create_task(self._renew_until_lost())
        try:
            done, _ = await asyncio.wait({leading, renewing}, return_when=asyncio.FIRST_COMPLETED)
            if renewing in done:
                log.error("%s: lost leadership of %s", self.identity, self.path)
            else:
                leading.result()
        finally:
            for task in (leading, renewing):
                task.cancel()
            await asyncio.gather(leading, renewing, return_exceptions=True)
        await self.release()

    async def _try_acquire(self) -> bool:
        try:
            return await asyncio.wait_for(self._try_acquire_or_renew(), self.config.renew_deadline)
        except Exception as error:  # an unreachable API server: keep campaigning
            log.warning("%s: cannot reach the Lease: %s", self.identity, error)
            return False

    async def _renew_until_lost(self) -> None:
        last_renew = time.monotonic()
        while True:
            await asyncio.sleep(self.config.retry_period)
            renewed = await self._try_acquire()
            now = time.monotonic()
            if renewed:
                last_renew = now
            elif now - last_renew >= self.config.renew_deadline:
                return

    async def release(self) -> None:
        """Give the Lease up if this replica holds it (best effort)."""
        try:
            lease = await self.api.get(self.path)
            spec = lease.get("spec", {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec["holderIdentity"] = ""
            spec["renewTime"] = _now()
            await self.api.replace(self.path, lease)
        except Exception as error:  # shutdown must not fail on a lost Lease
            log.warning("%s: could not release the Lease: %s", self.identity, error)

    async def _try_acquire_or_renew(self) -> bool:
        now = _now()
        duration = round(self.config.lease_duration)
        try:
            lease = await self.api.get(self.path)
        except ApiError as error:
            if error.status != 404:
                raise
            if self.config.create_missing:
                return await self._write(self._fresh_lease(now, duration), create=True)
            if not self._told_missing:
                log.warning(
                    "%s: Lease %s/%s does not exist; its installer makes it (--no-create-lease): "
                    "waiting for it",
                    self.identity,
                    self.config.namespace,
                    self.config.name,
                )
                self._told_missing = True
            return False
        self._told_missing = False
        spec: JsonObject = lease.setdefault("spec", {})
        holder = spec.get("holderIdentity") or ""
        record = (holder, str(spec.get("renewTime")))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        expired = time.monotonic() - self._observed_at >= self.config.lease_duration
        if holder and holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec["acquireTime"] = now
        spec.update(holderIdentity=self.identity, renewTime=now, leaseDurationSeconds=duration)
        return await self._write(lease, create=False)

    def _fresh_lease(self, now: str, duration: int) -> JsonObject:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": duration,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }

    async def _write(self, lease: JsonObject, *, create: bool) -> bool:
        try:
            if create:
                collection = self.path.rsplit("/", 1)[0]
                stored = await self.api.create(collection, lease)
            else:
                stored = await self.api.replace(self.path, lease)
        except ApiError as error:
            if error.status in (409, 422):
                return False
            raise
        spec = stored.get("spec", {})
        self._observed = (spec.get("holderIdentity") or "", str(spec.get("renewTime")))
        self._observed_at = time.monotonic()
        return True
