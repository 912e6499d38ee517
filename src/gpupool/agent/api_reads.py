"""The objects the agent reads from the API server by name: pods and ResourceClaims."""

from __future__ import annotations

import msgspec

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.objects.dra.records import API_PREFIX, ResourceClaim
from gpupool.kube.objects.records import PodRecord


class ApiPods:
    """Pods read from the API server (the hand-off's :class:`~.handoff.PodSource`)."""

    def __init__(self, api: KubeAPI) -> None:
        self._api = api

    async def get(self, namespace: str, name: str) -> PodRecord | None:
        """The pod, or None if it does not exist."""
        try:
            body = await self._api.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return msgspec.json.decode(body, type=PodRecord)


class ApiClaims:
    """ResourceClaims read from the API server (the preparer's claim source)."""

    def __init__(self, api: KubeAPI) -> None:
        self._api = api

    async def get(self, namespace: str, name: str) -> ResourceClaim | None:
        """The claim, or None if it does not exist."""
        path = f"{API_PREFIX}/namespaces/{namespace}/resourceclaims/{name}"
        try:
            body = await self._api.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return msgspec.json.decode(body, type=ResourceClaim)
