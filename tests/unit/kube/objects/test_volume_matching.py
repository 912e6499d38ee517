"""Which volume an unbound claim may be bound to: kube's FindMatchingVolume, field by field."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gpupool.kube.objects.volumes import CSINode, PersistentVolume, PersistentVolumeClaim, matches

from ..volume_builders import claim, local_volume


def _with(volume: PersistentVolume, **changes: Any) -> PersistentVolume:
    body = msgspec.to_builtins(volume)
    for path, value in changes.items():
        section, field = path.split("__")
        body[section][field] = value
    return msgspec.convert(body, PersistentVolume)


def _claim_with(base: PersistentVolumeClaim, **spec: Any) -> PersistentVolumeClaim:
    body = msgspec.to_builtins(base)
    body["spec"].update(spec)
    return msgspec.convert(body, PersistentVolumeClaim)


PLAIN = local_volume("pv", "n1", labels={"tier": "fast"})
CLAIM = claim("data")


@pytest.mark.parametrize(
    ("volume", "wanted", "fits"),
    [
        (PLAIN, CLAIM, True),
        (PLAIN, _claim_with(CLAIM, selector={"matchLabels": {"tier": "fast"}}), True),
        (PLAIN, _claim_with(CLAIM, selector={"matchLabels": {"tier": "slow"}}), False),
        (
            PLAIN,
            _claim_with(
                CLAIM,
                selector={
                    "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["fast"]}]
                },
            ),
            False,
        ),
        (PLAIN, _claim_with(CLAIM, volumeMode="Block"), False),
        (PLAIN, _claim_with(CLAIM, volumeAttributesClassName="gold"), False),
        (_with(PLAIN, spec__volumeAttributesClassName="gold"), CLAIM, False),
        (_with(PLAIN, metadata__deletionTimestamp="2025-01-01T00:00:00Z"), CLAIM, False),
        (_with(PLAIN, status__phase="Released"), CLAIM, False),
        (PLAIN, claim("data", size="11Gi"), False),
        (PLAIN, claim("data", storage_class="other"), False),
        (PLAIN, claim("data", modes=("ReadWriteOnce", "ReadOnlyMany")), False),
        # reserved for this claim by claimRef: phase, class and modes no longer matter
        (
            _with(
                PLAIN,
                spec__claimRef={"namespace": "default", "name": "data", "uid": "uid-data"},
                status__phase="Bound",
            ),
            claim("data", storage_class="other"),
            True,
        ),
        (
            _with(PLAIN, spec__claimRef={"namespace": "default", "name": "data", "uid": "u2"}),
            CLAIM,
            False,
        ),
    ],
)
def test_a_volume_matches_a_claim_as_kube_decides(
    volume: PersistentVolume, wanted: PersistentVolumeClaim, fits: bool
) -> None:
    assert matches(volume, wanted) is fits


def test_a_csinode_a_real_kubelet_writes_before_any_driver_registers_is_read() -> None:
    """The kubelet creates its CSINode with ``drivers: null``; refusing it stalled the CSINode
    informer, and with it the leader's first cycle (found by the real-kubelet test)."""
    raw = {"metadata": {"name": "n1"}, "spec": {"drivers": None}}
    node = msgspec.convert(raw, CSINode)
    assert node.limits == {}
