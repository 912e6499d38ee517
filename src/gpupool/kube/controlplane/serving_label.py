"""The label that sends the API Service's readers to the leader, and to no standby.

A standby keeps warm caches but holds no snapshot, so its REST API and dashboard answer
"standby: no snapshot". A Service that balanced over every replica would give that answer to
every other reader. Readiness cannot say "leader": a Deployment whose standby is never Ready
cannot roll (with ``maxSurge: 0`` it waits forever for the new standby to become available),
and the PodDisruptionBudget would count the standby as down. So the leader labels its own pod
``gpupool.io/serving=true`` while it leads, the chart's API Service selects that label, and a
second Service (metrics) selects every replica.

A leader that crashes cannot take its label off; its pod is not Ready meanwhile (so out of the
Service), its restarted process takes the label off before it answers, and the next leader
takes it off every other pod of its namespace when it starts to lead. The label is written with
the scheduler's own rights (it patches pods already); a failed write is logged and retried at
the next change of role, never fatal: readers then see a standby's answer, nothing worse.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import httpx2

from gpupool.kube.client.api import ApiError, KubeAPI

log = logging.getLogger(__name__)

SERVING_LABEL = "gpupool.io/serving"
"""On the leader's pod only (value ``"true"``); the chart's API Service selects it."""
WRITE_TIMEOUT = 5.0
"""Seconds one label write may take: it runs as leadership starts and ends, and a replica
stopping within its grace period must not wait on an API server that does not answer."""


def parse_pod(reference: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` as a pair.

    Raises:
        ValueError: Not two non-empty parts separated by one slash (the message names the flag).
    """
    namespace, slash, name = reference.partition("/")
    if not (slash and namespace and name) or "/" in name:
        raise ValueError(f"--serving-pod: expected NAMESPACE/NAME, got {reference!r}")
    return namespace, name


@dataclass(frozen=True, slots=True)
class ServingLabel:
    """This replica's own pod, labelled while the replica leads.

    Attributes:
        api: The replica's API client.
        namespace: The pod's namespace (the Deployment's).
        pod: The pod's name (the downward API's ``metadata.name``).
    """

    api: KubeAPI
    namespace: str
    pod: str

    async def lead(self) -> None:
        """Label this pod, then take the label off any other pod of the namespace."""
        await self._write(self.pod, serving=True)
        try:
            listing = await asyncio.wait_for(
                self.api.get(
                    f"/api/v1/namespaces/{self.namespace}/pods",
                    {"labelSelector": f"{SERVING_LABEL}=true"},
                ),
                WRITE_TIMEOUT,
            )
        except (ApiError, OSError, httpx2.HTTPError, TimeoutError) as error:
            log.warning("cannot list the pods labelled %s: %s", SERVING_LABEL, error)
            return
        for pod in listing["items"]:
            name = pod["metadata"]["name"]
            if name != self.pod:
                await self._write(name, serving=False)

    async def stand_by(self) -> None:
        """Take the label off this pod (at start, and when leadership ends)."""
        await self._write(self.pod, serving=False)

    async def _write(self, name: str, serving: bool) -> None:
        patch = {"metadata": {"labels": {SERVING_LABEL: "true" if serving else None}}}
        try:
            await asyncio.wait_for(
                self.api.patch(f"/api/v1/namespaces/{self.namespace}/pods/{name}", patch),
                WRITE_TIMEOUT,
            )
        except (ApiError, OSError, httpx2.HTTPError, TimeoutError) as error:
            if isinstance(error, ApiError) and error.status == 404 and not serving:
                return  # a pod that is gone carries no label
            verb = "set" if serving else "remove"
            log.warning("cannot %s %s on pod %s: %s", verb, SERVING_LABEL, name, error)
