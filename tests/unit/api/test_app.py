"""The REST API and dashboard over the example cluster, in process, and its access control."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest
from starlette.testclient import TestClient

from gpupool.api.app import create_api, create_face
from gpupool.api.auth import ReviewUnavailableError, is_loopback
from gpupool.api.example import example_view
from gpupool.api.model import CostBucket, CostLine, Record
from gpupool.api.records import Namespaces
from gpupool.api.scope import OTHER_NAMESPACE, namespace_of
from gpupool.api.store_records import StoreRecords
from gpupool.store.engine import open_store
from gpupool.store.records import Allocation, AuditAction, AuditEvent
from gpupool.store.writer import StoreWriter


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
    for asset in ("vendor/htmx.min.js", "vendor/uPlot.iife.min.js", "dashboard.js", "over_time.js"):
        assert client.get(f"/static/{asset}").status_code == 200


@dataclass
class Tenant:
    """An :class:`~gpupool.api.auth.Access` that may list pods in ``allowed`` (``*``: all)."""

    who: str
    allowed: frozenset[str]

    async def cluster_wide(self) -> bool:
        return "*" in self.allowed

    async def namespaces(self, candidates: Iterable[str]) -> frozenset[str]:
        wanted = set(candidates)
        return frozenset(wanted if "*" in self.allowed else wanted & self.allowed)


class Decider:
    """Authenticates tokens from a table (the real one asks the API server: integration)."""

    def __init__(self, readers: dict[str, Tenant] | None) -> None:
        self.readers = readers
        self.tokens: list[str] = []

    async def access(self, token: str) -> Tenant | None:
        self.tokens.append(token)
        if self.readers is None:
            raise ReviewUnavailableError("connection refused")
        return self.readers.get(token)


READERS = {
    "admin": Tenant("admin", frozenset({"*"})),
    "vision": Tenant("system:serviceaccount:vision:reader", frozenset({"vision"})),
}


def face_client(
    decider: Decider | None, host: str, *, insecure_local: bool = False, store: Store | None = None
) -> TestClient:
    face = create_face(example_view(), decider, store, insecure_local=insecure_local)
    return TestClient(face, client=(host, 40000))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_loopback_is_no_identity_unless_insecure_local() -> None:
    decider = Decider(READERS)
    for host in ("127.0.0.1", "127.0.0.6", "::1"):  # 127.0.0.6: a mesh sidecar forwarding
        assert face_client(decider, host).get("/api/v1/cluster").status_code == 401
        local = face_client(decider, host, insecure_local=True)
        assert local.get("/api/v1/cluster").status_code == 200
    assert decider.tokens == []
    off_host = face_client(decider, "10.1.2.3", insecure_local=True)
    assert off_host.get("/api/v1/cluster").status_code == 401


def test_a_token_is_needed_and_checked() -> None:
    decider = Decider(READERS)
    client = face_client(decider, "10.1.2.3")
    missing = client.get("/api/v1/cluster")
    assert missing.status_code == 401
    assert "audience gpupool.io/api" in missing.text
    assert missing.headers["www-authenticate"] == "Bearer"
    assert client.get("/api/v1/cluster", headers={"Authorization": "Basic x"}).status_code == 401
    assert client.get("/api/v1/cluster", headers=bearer("stranger")).status_code == 401
    ok = client.get("/api/v1/cluster", headers=bearer("admin"))
    assert ok.status_code == 200
    assert decider.tokens == ["stranger", "admin"]


def test_cluster_wide_views_need_every_namespace() -> None:
    client = face_client(Decider(READERS), "10.1.2.3")
    for path in ("/api/v1/cluster", "/api/v1/nodes", "/api/v1/teams", "/api/v1/pools", "/"):
        refused = client.get(path, headers=bearer("vision"))
        assert refused.status_code == 403, path
        assert "may not list pods in all namespaces" in refused.text
        assert client.get(path, headers=bearer("admin")).status_code == 200, path


def test_a_tenant_sees_its_own_namespaces_only() -> None:
    client = face_client(Decider(READERS), "10.1.2.3")
    everyone = client.get("/api/v1/pending", headers=bearer("admin")).json()
    assert {p["pod"] for p in everyone} == {"vision/train-1", "research/big-notebook"}
    own = client.get("/api/v1/pending", headers=bearer("vision")).json()
    assert [p["pod"] for p in own] == ["vision/train-1"]
    other = client.get("/api/v1/pending?namespace=research", headers=bearer("vision"))
    assert other.status_code == 403
    assert "may not list pods in namespace research" in other.text
    asked = client.get("/api/v1/pending?namespace=vision", headers=bearer("vision"))
    assert [p["pod"] for p in asked.json()] == ["vision/train-1"]
    refused = client.get("/api/v1/pending/research/big-notebook", headers=bearer("vision"))
    assert refused.status_code == 403
    # the explanation names the vision tenant's own pods, never another namespace's
    explained = client.get("/api/v1/pending/vision/train-1", headers=bearer("vision")).json()
    holders = {h for row in explained["closest"] for h in row["holders"]}
    assert holders, explained
    assert all(h.startswith("vision/") or h == OTHER_NAMESPACE for h in holders), holders
    assert OTHER_NAMESPACE in holders
    full = client.get("/api/v1/pending/vision/train-1", headers=bearer("admin")).json()
    assert any(h.startswith("nlp/") for row in full["closest"] for h in row["holders"])


def test_no_api_server_means_closed() -> None:
    down = face_client(Decider(None), "10.1.2.3")
    assert down.get("/api/v1/cluster", headers=bearer("admin")).status_code == 503
    none = face_client(None, "10.1.2.3")
    assert none.get("/api/v1/cluster", headers=bearer("admin")).status_code == 401


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
    """Records of two namespaces and one cluster-scoped object, filtered as a store would."""

    RECORDS = (
        Record(at="2026-12-01T00:00:02Z", kind="policy-change", subject="a100", detail="pool"),
        Record(at="2026-12-01T00:00:01Z", kind="reclaim", subject="nlp/idle-0", detail="idle"),
        Record(at="2026-12-01T00:00:00Z", kind="reclaim", subject="vision/v-0", detail="idle"),
    )

    def __init__(self) -> None:
        self.asked: list[object] = []

    def _kept(self, namespaces: Namespaces) -> list[Record]:
        self.asked.append(None if namespaces is None else sorted(namespaces))
        return [
            r for r in self.RECORDS if namespaces is None or namespace_of(r.subject) in namespaces
        ]

    async def namespaces(self) -> set[str]:
        return {namespace_of(r.subject) for r in self.RECORDS}

    async def actions(self, limit: int, namespaces: Namespaces) -> list[Record]:
        return [r for r in self._kept(namespaces) if r.kind == "reclaim"][:limit]

    async def audit(self, limit: int, namespaces: Namespaces) -> list[Record]:
        return self._kept(namespaces)[:limit]

    async def cost(self, namespaces: Namespaces) -> tuple[list[CostLine], list[CostBucket]]:
        lines = [CostLine(team="nlp", gpu_hours=12.5), CostLine(team="vision", gpu_hours=2.0)]
        return [line for line in lines if namespaces is None or line.team in namespaces], []


T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _event(minute: int, action: AuditAction, name: str, reason: str) -> AuditEvent:
    return AuditEvent(
        time=T0 + timedelta(minutes=minute),
        action=action,
        kind="Pod",
        namespace="nlp",
        name=name,
        reason=reason,
        tenant="nlp",
    )


async def test_with_a_store_the_api_and_dashboard_read_what_was_written(tmp_path: Path) -> None:
    """Real records in a real SQLite store, read back through HTTP as a client would."""
    engine = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'face.db'}")
    try:
        async with StoreWriter(engine) as writer:
            await writer.audit(_event(0, AuditAction.BIND, "idle-0", "bound to n1"))
            await writer.audit(_event(90, AuditAction.RECLAIM, "idle-0", "idle 30 min: reclaimed"))
            await writer.audit(_event(95, AuditAction.BIND, "next-0", "bound to n1"))
            start = Allocation(
                pod_uid="uid-idle-0", namespace="nlp", name="idle-0", queue="nlp", pool="a100",
                node="n1", kind="whole", units=2.0, memory_gib=80.0, start=T0,
            )  # fmt: skip
            await writer.allocation_started(start)
            await writer.allocation_ended(start, T0 + timedelta(minutes=90))
        source = StoreRecords(engine, now=lambda: T0 + timedelta(hours=2))
        face = create_face(example_view(), None, source, insecure_local=True)
        transport = httpx2.ASGITransport(app=face, client=("127.0.0.1", 40000))
        async with httpx2.AsyncClient(transport=transport, base_url="http://face") as client:
            actions = (await client.get("/api/v1/governance/actions")).json()
            audit = (await client.get("/api/v1/audit?limit=2")).json()
            cost = (await client.get("/api/v1/cost")).json()
            page = (await client.get("/")).text
    finally:
        await engine.dispose()
    assert actions["configured"] is True
    assert [(a["kind"], a["subject"]) for a in actions["items"]] == [("reclaim", "nlp/idle-0")]
    assert actions["items"][0]["at"] == "2026-12-01T10:30:00+00:00"
    assert [(a["kind"], a["subject"]) for a in audit["items"]] == [
        ("bind", "nlp/next-0"),
        ("reclaim", "nlp/idle-0"),
    ]  # the latest two, newest first
    assert cost["teams"] == [{"team": "nlp", "gpu_hours": 3.0}]  # 2 GPUs for 90 minutes
    by_day = [b["gpu_hours"].get("nlp", 0.0) for b in cost["buckets"]]
    assert sum(by_day) == pytest.approx(3.0)
    assert len(by_day) == 30  # one bucket per day of the window
    assert "idle 30 min: reclaimed" in page
    assert 'data-source="store"' in page


def test_a_tenant_reads_only_its_namespaces_records() -> None:
    store = Store()
    client = face_client(Decider(READERS), "10.1.2.3", store=store)
    audit = client.get("/api/v1/audit", headers=bearer("vision")).json()["items"]
    assert [r["subject"] for r in audit] == ["vision/v-0"]
    assert store.asked == [["vision"]]  # filtered where the records are, before the limit
    everything = client.get("/api/v1/audit", headers=bearer("admin")).json()["items"]
    assert len(everything) == 3  # the cluster-scoped policy change only cluster-wide
    actions = client.get("/api/v1/governance/actions", headers=bearer("vision")).json()
    assert [r["subject"] for r in actions["items"]] == ["vision/v-0"]
    cost = client.get("/api/v1/cost", headers=bearer("vision")).json()
    assert cost["teams"] == [{"team": "vision", "gpu_hours": 2.0}]
    other = client.get("/api/v1/cost?namespace=nlp", headers=bearer("vision"))
    assert other.status_code == 403
    assert "namespace nlp" in other.text


def test_without_a_store_the_dashboard_says_so(client: TestClient) -> None:
    assert "no store configured" in client.get("/ui/live").text


def test_a_browser_signs_in_with_a_token_in_a_cookie() -> None:
    decider = Decider(READERS)
    client = face_client(decider, "10.1.2.3")
    page = client.get("/")
    assert page.status_code == 401
    assert '<form method="post" action="/login">' in page.text
    assert "--audience gpupool.io/api" in page.text
    bad = client.post("/login", data={"token": "a b"})
    assert bad.status_code == 400
    signed_in = client.post("/login", data={"token": "admin"}, follow_redirects=False)
    assert signed_in.status_code == 303
    cookie = signed_in.headers["set-cookie"]
    assert "gpupool_token=admin" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert client.get("/").status_code == 200  # the cookie is checked like a header
    assert decider.tokens[-1] == "admin"
    client.cookies.set("gpupool_token", "stranger")
    assert client.get("/api/v1/pending").status_code == 401
    out = client.post("/logout", follow_redirects=False)
    assert out.status_code == 303
    assert 'gpupool_token=""' in out.headers["set-cookie"]
