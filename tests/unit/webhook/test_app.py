from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from gpupool.webhook.app import create_app
from gpupool.webhook.facts import ClusterFacts

from .helpers import FACTS, Json, apply_patch, pod


def review(obj: Json | None, *, operation: str = "CREATE", kind: str = "Pod") -> Json:
    request: Json = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "team-a",
        "operation": operation,
        "userInfo": {"username": "alice"},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


class Facts:
    def __init__(self) -> None:
        self.current: ClusterFacts | None = FACTS

    def __call__(self) -> ClusterFacts | None:
        return self.current


@pytest.fixture
def facts() -> Facts:
    return Facts()


@pytest.fixture
def client(facts: Facts) -> Iterator[TestClient]:
    with TestClient(create_app(facts)) as test_client:
        yield test_client


def answer(client: TestClient, path: str, body: Any) -> Json:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    result: Json = response.json()
    assert result["apiVersion"] == "admission.k8s.io/v1"
    assert result["kind"] == "AdmissionReview"
    assert result["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    return result["response"]


def test_mutate_answers_with_a_base64_json_patch(client: TestClient) -> None:
    obj = pod({"gpupool.io/gpu": "1"})
    response = answer(client, "/mutate", review(obj))
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    mutated = apply_patch(obj, patch)
    assert mutated["spec"]["schedulerName"] == "gpupool"
    assert mutated["metadata"]["labels"]["gpupool.io/queue"] == "research"
    assert all("allocation" not in op["path"] for op in patch)


def test_a_refusal_names_the_field(client: TestClient) -> None:
    obj = pod({"gpupool.io/gpu": "1", "gpupool.io/gpu-cores": "101"})
    response = answer(client, "/mutate", review(obj))
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert response["status"]["message"].startswith(
        "spec.containers[0].resources.limits[gpupool.io/gpu-cores]: must be a whole number"
    )
    assert "patch" not in response


def test_validate_never_patches_and_refuses_what_mutation_should_have_set(
    client: TestClient,
) -> None:
    obj = pod({"gpupool.io/gpu": "1"})
    response = answer(client, "/validate", review(obj))
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("spec.schedulerName: must be 'gpupool'")
    mutated = apply_patch(
        obj, json.loads(base64.b64decode(answer(client, "/mutate", review(obj))["patch"]))
    )
    assert answer(client, "/validate", review(mutated)) == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
    }


@pytest.mark.parametrize(
    ("obj", "operation", "kind"),
    [(None, "DELETE", "Pod"), ({"spec": {}}, "CREATE", "Deployment")],
)
def test_other_objects_and_operations_are_admitted_unchanged(
    client: TestClient, obj: Json | None, operation: str, kind: str
) -> None:
    response = answer(client, "/mutate", review(obj, operation=operation, kind=kind))
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


@pytest.mark.parametrize(
    "body",
    [
        {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 1}},
        [],
        "garbage",
    ],
)
def test_an_unreadable_review_is_a_client_error(client: TestClient, body: Any) -> None:
    response = client.post("/mutate", json=body)
    assert response.status_code == 422
    assert response.json()["message"].startswith("not an AdmissionReview v1: ")
    assert client.post("/validate", content=b"\xff{").status_code == 422


def test_readiness_waits_for_the_facts(client: TestClient, facts: Facts) -> None:
    facts.current = None
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 503
    # not ready, it still admits with the checks that need no facts
    response = answer(client, "/mutate", review(pod({"gpupool.io/gpu": "64"})))
    assert response["allowed"] is True
    facts.current = FACTS
    assert client.get("/readyz").status_code == 200
