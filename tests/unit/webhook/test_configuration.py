from __future__ import annotations

import base64

import pytest

from gpupool.webhook.configuration import (
    MUTATING,
    VALIDATING,
    WebhookTarget,
    claims_expression,
    match_expression,
    webhook_configurations,
)

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_both_configurations_call_the_webhook_with_the_ca() -> None:
    configs = webhook_configurations(CA, WebhookTarget(url="https://127.0.0.1:9443/"))
    mutating = configs[MUTATING]["webhooks"][0]
    validating = configs[VALIDATING]["webhooks"][0]
    assert mutating["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate"
    assert validating["clientConfig"]["url"] == "https://127.0.0.1:9443/validate"
    assert base64.b64decode(mutating["clientConfig"]["caBundle"]) == CA
    for webhook in (mutating, validating):
        assert webhook["failurePolicy"] == "Fail"
        assert webhook["sideEffects"] == "None"
        assert webhook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
        assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == [
            "gpupool-system",
            "kube-system",
        ]
        assert webhook["matchConditions"][0]["expression"] == match_expression()
    assert mutating["reinvocationPolicy"] == "IfNeeded"


def test_claim_pods_go_to_a_second_webhook_on_create_that_always_fails_open() -> None:
    configs = webhook_configurations(CA, WebhookTarget(url="https://127.0.0.1:9443/"))
    for collection in (MUTATING, VALIDATING):
        pods, claims = configs[collection]["webhooks"]
        assert claims["name"] == pods["name"].replace("pods.", "claims.")
        assert (pods["failurePolicy"], claims["failurePolicy"]) == ("Fail", "Ignore")
        assert claims["rules"][0]["operations"] == ["CREATE"]
        assert claims["clientConfig"] == pods["clientConfig"]
        assert claims["namespaceSelector"] == pods["namespaceSelector"]
        (condition,) = claims["matchConditions"]
        assert condition["expression"] == claims_expression()
        assert f"!({match_expression()})" in condition["expression"]  # never both webhooks


def test_a_service_target_and_fail_open() -> None:
    target = WebhookTarget(service_namespace="ops", service_name="gpupool-webhook")
    configs = webhook_configurations(
        CA, target, failure_policy="Ignore", timeout_seconds=3, webhook_namespace="ops"
    )
    webhook = configs[MUTATING]["webhooks"][0]
    assert webhook["clientConfig"]["service"] == {
        "namespace": "ops",
        "name": "gpupool-webhook",
        "port": 443,
        "path": "/mutate",
    }
    assert (webhook["failurePolicy"], webhook["timeoutSeconds"]) == ("Ignore", 3)
    assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "ops"]


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"url": "http://127.0.0.1:1"},
        {"url": "https://x", "service_name": "s", "service_namespace": "n"},
        {"service_name": "s"},
    ],
)
def test_a_bad_target_is_refused(fields: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"url|service"):
        WebhookTarget(**fields)  # type: ignore[arg-type]


def test_bad_policy_or_timeout_is_refused() -> None:
    target = WebhookTarget(url="https://127.0.0.1:1")
    with pytest.raises(ValueError, match="failure_policy"):
        webhook_configurations(CA, target, failure_policy="Maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_seconds"):
        webhook_configurations(CA, target, timeout_seconds=31)
