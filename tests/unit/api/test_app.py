"""The REST API and dashboard over the example cluster, in process, and its access control."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from gpupool.api.app import create_api, create_face
from gpupool.api.auth import ReviewUnavailableError, is_loopback
from gpupool.api.example import example_view
from gpupool.api.model import CostLine, Record


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_api(example_view())) as test_client:
        yield test_client


def test_cluster_and_nodes(client: TestClient) -> None:
    cluster = client.get("/api/v1/cluster").json()
    assert (cluster["nodes"], cluster["gpus"], cluster["pending_pods"]) == (3, 10, 2)
    nodes = client.get("/api/v1/nodes").json()
    assert sum(len(gpu["shares"]) for node in nodes for gpu in node["gpus"]) == 8


def test_explain_and_unknown_pod(client: TestClient) -> None:
    answer = client.get("/api/v1/pending/vision/train-1")
    assert answer.status_code == 200
    assert answer.json()["closest"][0]["node"] == "a100-2"
    missing = client.get("/api/v1/pending/vision/nope")
    assert missing.status_code == 404
    assert "vision/nope" in missing.json()["detail"]
    bad = client.get("/api/v1/pending/Vision!/x")
    assert bad.status_code == 422
    assert "namespace" in bad.text


def test_without_a_store_governance_says_so(client: TestClient) -> None:
    for path in ("/api/v1/governance/actions", "/api/v1/audit"):
        body = client.get(path).json()
        assert body == {"configured": False, "note": body["note"], "items": []}
        assert "no store configured" in body["note"]
    cost = client.get("/api/v1/cost").json()
    assert (cost["configured"], cost["teams"]) == (False, [])
    assert client.get("/api/v1/governance/actions?limit=0").status_code == 422


def test_pools_and_queues_are_empty_until_configured(client: TestClient) -> None:
    assert client.get("/api/v1/pools").json() == []
    assert client.get("/api/v1/queues").json() == []


def test_openapi_lists_the_api_but_not_the_dashboard(client: TestClient) -> None:
    spec = client.get("/api/openapi.json").json()
    assert "/api/v1/nodes" in spec["paths"]
    assert "/api/v1/pending/{namespace}/{name}" in spec["paths"]
    assert "/" not in spec["paths"]
    assert "/ui/live" not in spec["paths"]


def test_dashboard_page_and_fragment(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert 'hx-trigger="every 2s"' in page.text
    assert page.text.count('class="gpu"') == 10
    assert page.text.count('class="share"') == 8
    assert "Insufficient gpupool.io/gpu" in page.text
    assert "cdn" not in page.text.lower()
    fragment = client.get("/ui/live").text
    assert fragment.count('class="gpu"') == 10
    assert "<html" not in fragment
    for asset in ("vendor/htmx.min.js", "vendor/uPlot.iife.min.js", "dashboard.js"):
        assert client.get(f"/static/{asset}").status_code == 200


class Decider:
    def __init__(self, answer: tuple[bool, str] | None) -> None:
        self.answer = answer
        self.tokens: list[str] = []

    async def decide(self, token: str) -> tuple[bool, str]:
        self.tokens.append(token)
        if self.answer is None:
            raise ReviewUnavailableError("connection refused")
        return self.answer


def face_client(decider: Decider | None, host: str) -> TestClient:
    return TestClient(create_face(example_view(), decider), client=(host, 40000))


def test_loopback_needs_no_token() -> None:
    decider = Decider((False, "nobody"))
    for host in ("127.0.0.1", "::1"):
        assert face_client(decider, host).get("/api/v1/cluster").status_code == 200
    assert decider.tokens == []


def test_off_host_needs_an_allowed_token() -> None:
    allowed = Decider((True, "alice"))
    client = face_client(allowed, "10.1.2.3")
    assert client.get("/api/v1/cluster").status_code == 401
    assert client.get("/api/v1/cluster", headers={"Authorization": "Basic x"}).status_code == 401
    ok = client.get("/api/v1/cluster", headers={"Authorization": "Bearer tok-1"})
    assert ok.status_code == 200
    assert allowed.tokens == ["tok-1"]
    refused = face_client(Decider((False, "bob may not get gpupools.gpupool.io")), "10.1.2.3")
    answer = refused.get("/", headers={"Authorization": "Bearer tok-2"})
    assert answer.status_code == 403
    assert "bob may not" in answer.text


def test_no_api_server_means_closed() -> None:
    down = face_client(Decider(None), "10.1.2.3")
    assert down.get("/api/v1/cluster", headers={"Authorization": "Bearer t"}).status_code == 503
    none = face_client(None, "10.1.2.3")
    assert none.get("/api/v1/cluster", headers={"Authorization": "Bearer t"}).status_code == 403


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("10.0.0.1", False),
        ("testclient", False),
        ("", False),
        (None, False),
    ],
)
def test_is_loopback(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


class Store:
    def actions(self, limit: int) -> list[Record]:
        return [
            Record(
                at="2026-12-01T00:00:00Z",
                kind="reclaim",
                subject="nlp/idle-0",
                detail="idle 30 min: share returned",
            )
        ][:limit]

    def audit(self, limit: int) -> list[Record]:
        return []

    def cost(self) -> list[CostLine]:
        return [CostLine(team="nlp", gpu_hours=12.5)]


def test_with_a_store_governance_and_cost_are_shown() -> None:
    with TestClient(create_api(example_view(), Store())) as client:
        actions = client.get("/api/v1/governance/actions?limit=5").json()
        assert actions["configured"] is True
        assert actions["items"][0]["subject"] == "nlp/idle-0"
        assert client.get("/api/v1/cost").json()["teams"] == [{"team": "nlp", "gpu_hours": 12.5}]
        page = client.get("/").text
        assert "idle 30 min: share returned" in page


def test_without_a_store_the_dashboard_says_so(client: TestClient) -> None:
    assert "no store configured" in client.get("/ui/live").text
