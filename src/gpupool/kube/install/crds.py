"""The gpupool.io CustomResourceDefinitions (GPUPool, GPUQueue) and how to install them.

The definitions live as YAML files in the package (``crds/``) rather than as Python dicts, so
that an operator can ``kubectl apply -f`` exactly what the control plane installs, and review the
schema where the API server reads it. The schemas carry the validation (enums, bounds, CEL rules
across fields), so a bad pool or queue is refused by the API server with the field named, before
any gpupool process sees it.

:func:`install_crds` is idempotent: it creates each definition or replaces an older one, then
waits for ``Established``, the point from which the API server serves the new resource. Given
the scheduler's identities, it also installs the admission policies that keep everyone else from
writing a pod's allocation or placing a GPU pod past the scheduler, and every pod off a class
its queues do not allow; given the agents' identities, the one that keeps each agent to its
own Node
(:mod:`gpupool.kube.install.admission_policy`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from importlib import resources
from typing import Any

import yaml

from gpupool.kube.client.api import ApiError, JsonObject, KubeAPI
from gpupool.kube.install.admission_policy import (
    BINDING_PATH,
    CLAIM_MANIFEST,
    POLICY_PATH,
    agent_policy_manifests,
    bypass_policy_manifests,
    declared_runtime_manifests,
    policy_manifests,
    queue_class_manifests,
)
from gpupool.kube.install.device_classes import install_device_classes

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_POLL_SECONDS = 0.1


def crd_manifests() -> list[dict[str, Any]]:
    """The CustomResourceDefinitions shipped in the package, parsed, in file name order."""
    folder = resources.files("gpupool.kube.install") / "crds"
    files = sorted(
        (entry for entry in folder.iterdir() if entry.name.endswith(".yaml")),
        key=lambda entry: entry.name,
    )
    return [yaml.safe_load(entry.read_text(encoding="utf-8")) for entry in files]


async def install_crds(
    api: KubeAPI,
    timeout: float = 30.0,
    *,
    scheduler_identities: Sequence[str] = (),
    agent_identities: Sequence[str] = (),
    scheduler_name: str = "gpupool",
) -> None:
    """Create or update every gpupool CRD and wait until the API server serves them.

    Args:
        api: A client allowed to write CustomResourceDefinitions.
        timeout: Seconds, for all definitions together, to become ``Established``.
        scheduler_identities: When given, also install the admission policies that let only
            these users write a pod's allocation, allocate gpupool's devices to claims and
            create GPU pods with ``spec.nodeName`` (:mod:`gpupool.kube.install.admission_policy`),
            and the one that refuses a pod a class its queues do not allow.
        agent_identities: When given, also install the policy that lets these users (the node
            agents) write only their own Node.
        scheduler_name: The ``spec.schedulerName`` the bypass policy protects.

    The DeviceClasses of gpupool's DRA driver are installed too, where the cluster serves
    ``resource.k8s.io/v1`` (:mod:`gpupool.kube.install.device_classes`).

    Raises:
        ValueError: A bad scheduler identity (before anything is written).
        ApiError: The API server refused a definition or the policy.
        TimeoutError: A definition was not ``Established`` in time.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    manifests = crd_manifests()
    writes = [(CRD_PATH, manifest) for manifest in manifests]
    policies: list[dict[str, Any]] = []
    if scheduler_identities:
        policies += policy_manifests(scheduler_identities)
        policies += policy_manifests(scheduler_identities, CLAIM_MANIFEST)
        policies += bypass_policy_manifests(scheduler_identities, scheduler_name)
        policies += declared_runtime_manifests()
    if agent_identities:
        policies += agent_policy_manifests(agent_identities)
    writes += [
        (POLICY_PATH if doc["kind"] == "ValidatingAdmissionPolicy" else BINDING_PATH, doc)
        for doc in policies
    ]
    for collection, manifest in writes:
        await apply_object(api, collection, manifest)
    await install_device_classes(api)
    for manifest in manifests:
        await _wait_established(api, manifest["metadata"]["name"], deadline)
        await _wait_served(api, manifest, deadline)
    if scheduler_identities:  # its parameters are GPUQueues: only once they are served
        policy, binding = queue_class_manifests()
        await apply_object(api, POLICY_PATH, policy)
        await apply_object(api, BINDING_PATH, binding)


async def apply_object(api: KubeAPI, collection: str, manifest: JsonObject) -> None:
    """Create ``manifest`` in ``collection``, or replace the stored one at its resourceVersion.

    For cluster-scoped objects that gpupool owns whole (definitions, policies): what is stored
    afterwards is exactly ``manifest``, whatever an earlier version of gpupool installed.
    """
    try:
        await api.create(collection, manifest)
    except ApiError as error:
        if error.status != 409:
            raise
        path = f"{collection}/{manifest['metadata']['name']}"
        version = (await api.get(path))["metadata"]["resourceVersion"]
        metadata = {**manifest["metadata"], "resourceVersion": version}
        await api.replace(path, {**manifest, "metadata": metadata})


async def _wait_established(api: KubeAPI, name: str, deadline: float) -> None:
    loop = asyncio.get_running_loop()
    while True:
        crd = await api.get(f"{CRD_PATH}/{name}")
        conditions = crd.get("status", {}).get("conditions", [])
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        if loop.time() > deadline:
            raise TimeoutError(f"CustomResourceDefinition {name} not Established: {conditions}")
        await asyncio.sleep(_POLL_SECONDS)


async def _wait_served(api: KubeAPI, manifest: JsonObject, deadline: float) -> None:
    """Wait until the new resource can be listed.

    ``Established`` comes a moment before the API server's storage for the resource is ready;
    in between a LIST answers 429 "storage is (re)initializing".
    """
    spec = manifest["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("storage"))
    path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
    loop = asyncio.get_running_loop()
    while True:
        try:
            await api.get(path, {"limit": "1"})
            return
        except ApiError as error:
            if error.status not in (404, 429, 503) or loop.time() > deadline:
                raise
        await asyncio.sleep(_POLL_SECONDS)
