"""Whether a pod's DRA claims ask for gpupool's devices, read from the API server at admission.

Such a pod is gpupool's as much as one asking for ``gpupool.io/gpu``: the webhook routes it to
gpupool and checks its queue and class the same way. The pod names its claims only
(``spec.resourceClaims``: a ResourceClaim, or a ResourceClaimTemplate from which
kube-controller-manager makes one per pod), so the webhook reads each one by name, and each
DeviceClass a request names (``exactly`` or a ``firstAvailable`` alternative). A class is
gpupool's when it carries ``gpupool.io/request-kind``, the label the scheduler reads
(:mod:`gpupool.kube.objects.dra.claims`).

A claim or template that does not exist yet asks for nothing: the pod is admitted unrouted, and
kube-scheduler, which then holds it, cannot allocate gpupool's devices
(``gpupool-claim-allocation-writers`` refuses every writer but gpupool), so such a pod pends
with that refusal as its reason instead of running outside its queue. Create the claim (or
template) before its pod, as Deployments and Jobs with templates do. Any other failure to read
is raised: the API server then applies the webhook's failure policy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import msgspec

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.objects.dra.records import (
    API_PREFIX,
    CLASSES_PATH,
    LABEL_REQUEST_KIND,
    DeviceClass,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimTemplate,
)

T = TypeVar("T")
READ_TIMEOUT = 3.0
"""Seconds one read may take: the API server waits on the whole review (its timeoutSeconds)."""


class _Alternative(msgspec.Struct, frozen=True, rename="camel"):
    """One ``firstAvailable`` entry: only its class matters here."""

    device_class_name: str = ""


def has_claims(pod: Mapping[str, Any]) -> bool:
    """Whether the pod names any claim (only such pods are read further)."""
    spec = pod.get("spec")
    return isinstance(spec, Mapping) and bool(spec.get("resourceClaims"))


def class_names(spec: ResourceClaimSpec) -> Iterator[str]:
    """Every DeviceClass a claim's requests name, alternatives included."""
    for request in spec.devices.requests:
        if request.exactly is not None:
            yield request.exactly.device_class_name
        for raw in request.first_available:
            yield msgspec.json.decode(raw, type=_Alternative).device_class_name


class ClaimReader:
    """Reads a pod's claims, templates and their classes with the webhook's own client.

    Args:
        api: A client whose user may get resourceclaims, resourceclaimtemplates and
            deviceclasses (deploy/webhook.yaml's ClusterRole).
    """

    def __init__(self, api: KubeAPI) -> None:
        self.api = api

    async def asks_for_gpupool(self, namespace: str, pod: Mapping[str, Any]) -> bool:
        """Whether any claim the pod names has a request of one of gpupool's DeviceClasses.

        Raises:
            ApiError: A read the API server refused, other than "not found".
            TimeoutError: A read took longer than READ_TIMEOUT.
        """
        entries = pod.get("spec", {}).get("resourceClaims") or []
        for entry in entries:
            spec = await self._claim_spec(namespace, entry) if isinstance(entry, Mapping) else None
            for name in set(class_names(spec)) if spec is not None else ():
                if name and await self._is_gpupool_class(name):
                    return True
        return False

    async def _claim_spec(
        self, namespace: str, entry: Mapping[str, Any]
    ) -> ResourceClaimSpec | None:
        base = f"{API_PREFIX}/namespaces/{namespace}"
        if name := entry.get("resourceClaimName"):
            claim = await self._read(f"{base}/resourceclaims/{name}", ResourceClaim)
            return claim.spec if claim is not None else None
        if name := entry.get("resourceClaimTemplateName"):
            path = f"{base}/resourceclaimtemplates/{name}"
            template = await self._read(path, ResourceClaimTemplate)
            return template.spec.spec if template is not None else None
        return None

    async def _is_gpupool_class(self, name: str) -> bool:
        device_class = await self._read(f"{CLASSES_PATH}/{name}", DeviceClass)
        return device_class is not None and LABEL_REQUEST_KIND in device_class.metadata.labels

    async def _read(self, path: str, kind: type[T]) -> T | None:
        """The object at ``path`` (None: not found, or not of a shape anyone could use)."""
        try:
            body = await asyncio.wait_for(self.api.get(path), READ_TIMEOUT)
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        try:
            return msgspec.convert(body, kind)
        except msgspec.ValidationError:
            return None
