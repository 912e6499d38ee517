"""The DeviceClasses of gpupool's DRA driver, shipped as YAML and installed with the CRDs.

A ResourceClaim names a DeviceClass; the class's CEL selector restricts it to gpupool's devices
and its ``gpupool.io/request-kind`` label tells gpupool's scheduler how to place a request of it
(:mod:`gpupool.kube.objects.dra.claims`). Shipping them as one YAML file (``manifests/``) lets an
operator ``kubectl apply`` exactly what ``gpupool install-crds`` installs; ``deploy/`` and the
Helm chart carry copies that tests keep equal.
"""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

import yaml

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.objects.dra.records import CLASSES_PATH

log = logging.getLogger(__name__)

MANIFEST = "device-classes.yaml"


def device_class_manifests() -> list[dict[str, Any]]:
    """The DeviceClasses shipped in the package, in file order."""
    text = (resources.files("gpupool.kube.install") / "manifests" / MANIFEST).read_text("utf-8")
    return [document for document in yaml.safe_load_all(text) if document]


async def install_device_classes(api: KubeAPI) -> bool:
    """Create or update every gpupool DeviceClass; False when the cluster serves no DRA API.

    A cluster older than 1.34 has no ``resource.k8s.io/v1``: the extended-resource path still
    works there, so installing the CRDs must not fail for want of classes (a warning says so).

    Raises:
        ApiError: The API server refused a class.
    """
    from gpupool.kube.install.crds import apply_object  # crds imports this module

    try:
        await api.get(CLASSES_PATH, {"limit": "1"})
    except ApiError as error:
        if error.status != 404:
            raise
        log.warning("resource.k8s.io/v1 is not served: gpupool's DeviceClasses not installed")
        return False
    for manifest in device_class_manifests():
        await apply_object(api, CLASSES_PATH, manifest)
    return True
