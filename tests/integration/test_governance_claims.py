"""Governance of DRA claim pods on a real API server: judged and billed by what their claims hold.

A claim pod's own request has no GPUs (its claim holds them), so read from the pod a claim share
would be held to the whole GPU's idle threshold and billed nothing. The scheduler (placing claims)
and the governance controller run in this process against the test's kube-apiserver; the kwok
node's ResourceSlice and usage annotation are written by the test, as the agent would write them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.install.crds import apply_object, install_crds
from gpupool.kube.install.device_classes import device_class_manifests
from gpupool.kube.objects.dra.records import CLASSES_PATH
from gpupool.kube.scheduler.dra.claims import CLAIM_KEY
from gpupool.store.queries import allocations_overlapping
from gpupool.store.records import AuditAction

from .dra_helpers import create_claim_pod, node_with_slice
from .live_helpers import pending_reason, wait_for
from .test_governance import Governed, governance_on

SHARE = {
    "deviceClassName": "gpu-share.gpupool.io",
    "capacity": {"requests": {"memory": "20Gi", "compute": "250m"}},
}


@pytest.fixture
async def governed_claims(
    api: KubeAPI, namespace: str, tmp_path: Path, control_plane: LocalControlPlane
) -> AsyncIterator[Governed]:
    await install_crds(api)
    for manifest in device_class_manifests():
        await apply_object(api, CLASSES_PATH, manifest)
    node = f"{namespace}-n0"
    await node_with_slice(api, node, label=namespace)
    on = governance_on(api, control_plane, namespace, node, tmp_path, claims=True, mode="Shared")
    async with on as governed:
        yield governed


async def _start_claim_pods(g: Governed, *names: str, joins: str | None = None) -> dict[str, str]:
    for name in names:
        await create_claim_pod(
            g.api, g.namespace, name, SHARE, node_label=g.namespace,
            scheduler=g.scheduler_name, joins=joins,
        )  # fmt: skip

    async def running() -> bool:
        cached = {p.metadata.name: p for p in g.scheduler.state.pods.values()}
        return all(
            n in cached and cached[n].status.phase == "Running" and cached[n].spec.node_name
            for n in names
        )

    try:
        await wait_for(running, 60, f"claim pods {names} to run")
    except AssertionError as error:  # say why: the scheduler's reason is on the pod
        reasons = [pending_reason(await g.pod(name)) for name in names]
        raise AssertionError(f"{error}: {reasons}") from None
    return {name: (await g.pod(name))["metadata"]["uid"] for name in names}


async def test_a_claim_share_is_judged_by_its_claims_compute_and_billed_once(
    governed_claims: Governed,
) -> None:
    g = governed_claims
    uids = await _start_claim_pods(g, "capped", "idle")
    uids |= await _start_claim_pods(g, "joined", joins="capped")  # a second pod on capped's claim
    capped, idle, joined = uids["capped"], uids["idle"], uids["joined"]
    start = g.clock()
    # capped works flat out at its 25% cap: 5% SM of the whole GPU, under the pool's 10% but
    # above the 2.5% its share scales it to
    usage = {capped: (5.0, start), idle: (0.0, start), joined: (5.0, start)}
    await g.publish_usage(usage)
    await g.skip(61)  # past the pool's idleGrace
    now = g.clock()
    await g.publish_usage({**usage, capped: (5.0, now), joined: (5.0, now)})
    await g.controller.run_pass()
    assert (await g.pod("idle"))["metadata"]["annotations"]["gpupool.io/governance-warned"]
    snapshot = g.scheduler.state.snapshot
    assert snapshot is not None
    claims = [key for key in snapshot.allocations if key.startswith(CLAIM_KEY)]
    assert len(claims) == 2  # capped's (joined shares it) and idle's
    assert g.controller.stats.releases == 0  # a claim's holding is not a deleted pod's
    for name in ("capped", "joined"):
        annotations = (await g.pod(name))["metadata"].get("annotations", {})
        assert "gpupool.io/governance-warned" not in annotations, name

    await g.skip(61)  # past the reclaimGrace, still idle
    now = g.clock()
    await g.publish_usage({**usage, capped: (5.0, now), joined: (5.0, now)})
    await g.controller.run_pass()
    await wait_for(lambda: g.gone_or_evicted("idle"), 30, "the idle claim pod's eviction")
    assert not await g.gone_or_evicted("capped")
    assert not await g.gone_or_evicted("joined")
    evicted = next(r for r in await g.audit(idle) if r.values.get("step") == "evicted")
    assert evicted.action is AuditAction.RECLAIM
    assert evicted.values["threshold_percent"] == pytest.approx(2.5)  # the claim's 250m
    assert evicted.values["pool_threshold_percent"] == 10

    await g.writer.flush()
    rows = await allocations_overlapping(
        g.engine, datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)
    )
    billed = {row.pod_uid: row for row in rows}
    assert billed[capped].units == 0.25  # the claim's share, in the quota's units
    assert billed[capped].kind == "share"
    assert billed[idle].units == 0.25
    assert joined not in billed  # its claim is capped's: counted once
    assert g.controller.stats.queue_gpu_hours[g.namespace] > 0
