"""A replica the allocation policy refuses: the reason and the fix, said once each way."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from gpupool.kube.install.admission_policy import DENIAL, DENIED_USER_SUFFIX
from gpupool.kube.scheduler.rights import AllocationRights, denial_reason, is_policy_denial

REFUSAL = f"admission: {DENIAL}: kubernetes-admin{DENIED_USER_SUFFIX}"
MANIFEST = Path(__file__).parents[4] / "src/gpupool/kube/install/manifests/allocation-writers.yaml"


def test_the_policy_manifest_says_what_the_control_plane_looks_for() -> None:
    policy = next(yaml.safe_load_all(MANIFEST.read_text()))
    expression = policy["spec"]["validations"][0]["messageExpression"]
    assert f"'{DENIAL}: '" in expression
    assert f"'{DENIED_USER_SUFFIX}'" in expression


def test_only_the_policys_refusal_counts() -> None:
    assert is_policy_denial(REFUSAL)
    assert not is_policy_denial('user "x" cannot create resource "pods/binding"')


def test_the_reason_names_the_user_and_the_fix() -> None:
    reason = denial_reason(REFUSAL)
    assert "does not let kubernetes-admin write gpupool.io/allocation" in reason
    assert "install-crds --scheduler-identity kubernetes-admin" in reason


def test_said_once_however_many_binds_are_refused(caplog: pytest.LogCaptureFixture) -> None:
    rights = AllocationRights()
    with caplog.at_level(logging.WARNING, logger="gpupool.kube.scheduler.rights"):
        for _ in range(50):
            rights.refused(REFUSAL)
        assert rights.denied == denial_reason(REFUSAL)
        rights.allowed()
        rights.allowed()
    assert rights.denied == ""
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"]
