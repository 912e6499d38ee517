"""How Binding errors are classified: believed, refused (backoff) or unknown (look it up)."""

from __future__ import annotations

import pytest

from gpupool.kube.client.api import ApiError
from gpupool.kube.scheduler.writes import BindOutcome, classify


@pytest.mark.parametrize(
    ("status", "reason", "message", "outcome", "category"),
    [
        (409, "Conflict", "pod p is already assigned to node n0", BindOutcome.CONFLICT, "conflict"),
        (404, "NotFound", 'pods "p" not found', BindOutcome.GONE, "gone"),
        (403, "Forbidden", "user cannot create pods/binding", BindOutcome.REFUSED, "forbidden"),
        (
            403,
            "Forbidden",
            'admission webhook "w.gpupool.io" denied the request: no',
            BindOutcome.REFUSED,
            "admission",
        ),
        (
            422,
            "Invalid",
            "ValidatingAdmissionPolicy 'x' with binding 'y' denied request: no",
            BindOutcome.REFUSED,
            "admission",
        ),
        (422, "Invalid", "spec.nodeName: Invalid value", BindOutcome.REFUSED, "invalid"),
        (400, "BadRequest", "bad body", BindOutcome.REFUSED, "invalid"),
        (429, "TooManyRequests", "slow down", BindOutcome.REFUSED, "throttled"),
        (500, "InternalError", "etcd timeout", BindOutcome.UNKNOWN, "server"),
        (503, "ServiceUnavailable", "", BindOutcome.UNKNOWN, "server"),
    ],
)
def test_classify(
    status: int, reason: str, message: str, outcome: BindOutcome, category: str
) -> None:
    result = classify(ApiError(status, reason, message))
    assert result.outcome is outcome
    assert result.reason == category
    assert result.message
