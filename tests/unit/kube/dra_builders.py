"""Builders of DRA objects shaped like the API server's: slices, classes, claims, claim pods."""

from __future__ import annotations

from typing import Any

import msgspec

from gpupool.agent.dra.slice import slice_devices, slice_object
from gpupool.agent.nvml import GpuDevice
from gpupool.kube.install.device_classes import device_class_manifests
from gpupool.kube.objects.dra.records import DeviceClass, ResourceClaim, ResourceSlice
from gpupool.kube.objects.records import PodRecord

Json = dict[str, Any]


def decode(body: Json, kind: type[Any]) -> Any:
    """``body`` decoded as the informers decode the API server's JSON."""
    return msgspec.json.decode(msgspec.json.encode(body), type=kind)


CLASSES = {c["metadata"]["name"]: decode(c, DeviceClass) for c in device_class_manifests()}


def resource_slice(node: str, gpus: tuple[GpuDevice, ...], generation: int = 1) -> ResourceSlice:
    """The slice the agent publishes for ``gpus``, as read back from the API server."""
    body = slice_object(node, f"uid-{node}", slice_devices(gpus), generation)
    body["metadata"]["uid"] = f"slice-{node}-{generation}"
    result: ResourceSlice = decode(body, ResourceSlice)
    return result


def request_json(
    device_class: str,
    *,
    name: str = "gpu",
    count: int | None = None,
    capacity: dict[str, str] | None = None,
    selectors: list[str] | None = None,
    **extra: Any,
) -> Json:
    """One ``spec.devices.requests[]`` entry with ``exactly``."""
    exactly: Json = {"deviceClassName": device_class, **extra}
    if count is not None:
        exactly["count"] = count
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": exactly}


def claim(name: str, *requests: Json, namespace: str = "team", uid: str = "") -> ResourceClaim:
    """A ResourceClaim with these requests."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
        "spec": {"devices": {"requests": list(requests)}},
    }
    result: ResourceClaim = decode(body, ResourceClaim)
    return result


def claim_pod(
    name: str,
    claims: dict[str, str],
    *,
    namespace: str = "team",
    limits: dict[str, str] | None = None,
    templates: dict[str, str] | None = None,
) -> PodRecord:
    """A gpupool pod using ``claims`` (pod claim name -> ResourceClaim name)."""
    entries = [{"name": k, "resourceClaimName": v} for k, v in claims.items()]
    entries += [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    body = {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": "gpupool",
            "resourceClaims": entries,
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": limits or {},
                        "claims": [{"name": k} for k in [*claims, *(templates or {})]],
                    },
                }
            ],
        },
    }
    result: PodRecord = decode(body, PodRecord)
    return result
