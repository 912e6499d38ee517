"""The REST API of a running ``gpupool control-plane`` on a real kube-apiserver.

* Live: the leader's API shows the nodes, every bound pod's share on its GPU by namespace/name,
  and the pending pod with the same reason the scheduler wrote into its condition; ``gpupool
  explain`` reads it; a standby says it has no snapshot.
* Access: tokens are reviewed by the real API server (TokenReview, then SubjectAccessReview for
  ``get gpupools.gpupool.io``): a ServiceAccount bound to a role that allows it reads, one
  without is refused, a made-up token is not authenticated.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx2

from gpupool.api.app import create_face
from gpupool.api.auth import ClusterAuthorizer
from gpupool.api.example import example_view
from gpupool.kube.api import KubeAPI

from .live_helpers import (
    SchedulerProcesses,
    list_pods,
    pending_reason,
    two_bound_one_pending,
)


async def test_live_api_shows_shares_and_the_pending_reason(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    url = await two_bound_one_pending(api, namespace, schedulers)
    pods = await list_pods(api, namespace)
    waiting = next(p for p in pods if pending_reason(p))
    key = f"{namespace}/{waiting['metadata']['name']}"

    async with httpx2.AsyncClient(base_url=url, timeout=10) as http:
        ours = [
            n for n in (await http.get("/api/v1/nodes")).json() if n["name"].startswith(namespace)
        ]
        assert len(ours) == 1
        shares = [s for gpu in ours[0]["gpus"] for s in gpu["shares"]]
        bound = {f"{namespace}/{p['metadata']['name']}" for p in pods if p["spec"].get("nodeName")}
        assert {s["pod"] for s in shares} == bound
        assert {s["team"] for s in shares} == {namespace}
        pending = {p["pod"]: p for p in (await http.get("/api/v1/pending")).json()}
        assert pending[key]["reason"] == pending_reason(waiting)
        assert pending[key]["category"] == "insufficient_resources"
        cluster = (await http.get("/api/v1/cluster")).json()
        assert cluster["source"] == "live"
        explained = await http.get(f"/api/v1/pending/{key}")
        assert explained.status_code == 200
        assert explained.json()["closest"][0]["node"] == ours[0]["name"]
        page = await http.get("/")
        assert page.status_code == 200
        assert key in page.text
        assert (await http.get("/metrics")).status_code == 200

    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "gpupool", "explain", key, "--server", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Insufficient" in done.stdout

    schedulers.start("two")
    standby = await schedulers.http_url("two")
    async with httpx2.AsyncClient(base_url=standby, timeout=10) as http:
        cluster = (await http.get("/api/v1/cluster")).json()
        assert cluster["source"].startswith("live (standby")
        assert cluster["nodes"] == 0


async def _token(api: KubeAPI, namespace: str, account: str) -> str:
    await api.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": account}}
    )
    answer = await api.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    token: str = answer["status"]["token"]
    return token


async def test_tokens_are_reviewed_by_the_api_server(api: KubeAPI, namespace: str) -> None:
    reader, other = await _token(api, namespace, "reader"), await _token(api, namespace, "other")
    role = f"{namespace}-gpupool-reader"
    await api.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "metadata": {"name": role},
            "rules": [{"apiGroups": ["gpupool.io"], "resources": ["gpupools"], "verbs": ["get"]}],
        },
    )
    await api.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    authorizer = ClusterAuthorizer(api)
    allowed, who = await authorizer.decide(reader)
    assert (allowed, who) == (True, f"system:serviceaccount:{namespace}:reader")
    allowed, why = await authorizer.decide(other)
    assert not allowed
    assert why == f"system:serviceaccount:{namespace}:other may not get gpupools.gpupool.io"
    assert await authorizer.decide("not-a-token") == (False, "token not authenticated")

    # the same through the face, as a request from off-host
    face = create_face(example_view(), authorizer)
    transport = httpx2.ASGITransport(app=face, client=("10.20.30.40", 5555))
    async with httpx2.AsyncClient(transport=transport, base_url="http://gpupool") as http:
        assert (await http.get("/api/v1/cluster")).status_code == 401
        ok = await http.get("/api/v1/cluster", headers={"Authorization": f"Bearer {reader}"})
        assert ok.status_code == 200
        assert ok.json()["gpus"] == 10
        refused = await http.get("/", headers={"Authorization": f"Bearer {other}"})
        assert refused.status_code == 403
        assert "may not get gpupools.gpupool.io" in refused.text
