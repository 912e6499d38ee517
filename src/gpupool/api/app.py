"""The control plane's face: REST API under ``/api/v1`` and the dashboard at ``/``.

One FastAPI app, so the OpenAPI document (``/api/openapi.json``, browsable at ``/api/docs``)
describes exactly the routes that are served; the dashboard's HTML routes are left out of it.

Each request takes a detached copy of the view in the event loop (for the live scheduler, its
own loop: the copy is consistent and costs milliseconds), then builds and serializes the answer
in a worker thread, so a large cluster's answer never stops scheduling while it is computed; the
GPU map (``/api/v1/nodes`` and the dashboard) is reused while fresh (:mod:`gpupool.api.reuse`).
The answer is serialized with its pydantic type directly (the schema FastAPI documents), not
validated a second time. Path parameters are validated by FastAPI (422 naming the field), an
unknown pod is a 404, and nothing a client sends reaches the view except a pod name compared
for equality.

What each reader sees is decided per route (:mod:`gpupool.api.scope`): the cluster-wide views
need ``list pods`` in every namespace, the per-namespace lists show the reader's namespaces
(``?namespace=NS`` to ask for some; 403 for one it may not list pods in).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, FastAPI, HTTPException, Path, Query, Request, Response
from pydantic import StringConstraints, TypeAdapter
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp

from gpupool.api import records, view
from gpupool.api.auth import API_AUDIENCE, Authorizer, ClusterAuthorizer, RequireReader
from gpupool.api.congestion import CongestionSource, congestion_routes
from gpupool.api.contention import Contention, contention
from gpupool.api.dashboard import add_dashboard
from gpupool.api.explain import NotPendingError, explain
from gpupool.api.model import (
    Cluster,
    Cost,
    Explanation,
    Node,
    PendingPod,
    Pool,
    Queue,
    Records,
    Team,
)
from gpupool.api.records import RecordSource
from gpupool.api.reuse import Fresh
from gpupool.api.scope import (
    access_of,
    namespace_of,
    redact_holders,
    require_cluster_wide,
    shown_namespaces,
    shows,
)
from gpupool.api.sources import LiveView
from gpupool.api.view import ClusterView
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.scheduler.read_view import SchedulerReader

NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
"""A Kubernetes object name (DNS subdomain characters)."""
NamespaceQuery = Annotated[
    list[Annotated[str, StringConstraints(max_length=63, pattern=NAME)]],
    Query(
        default_factory=list,
        alias="namespace",
        description="Only these namespaces (repeat for several); default: every namespace "
        "the reader may list pods in",
        max_length=100,
    ),
]

T = TypeVar("T")


Answer = Callable[..., Awaitable[Response]]
"""Builds a view's answer from a detached copy, in a worker thread, and serializes it."""


def create_api(
    cluster_view: ClusterView,
    record_source: RecordSource | None = None,
    congestion: CongestionSource | None = None,
) -> FastAPI:
    """The API and dashboard over ``cluster_view``, with no access control (see create_face)."""
    app = FastAPI(
        title="gpupool",
        version="1",
        description="Read-only view of a gpupool cluster: GPUs and their shares, pending pods "
        "and why, teams, pools, queues, governance and cost.",
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
    )
    answer = _answerer(cluster_view)
    app.include_router(_cluster_routes(cluster_view, answer))
    app.include_router(_quota_routes(cluster_view, answer))
    app.include_router(_governance_routes(record_source))
    app.include_router(congestion_routes(congestion, _cluster_wide))
    add_dashboard(app, cluster_view, record_source, _cluster_wide)
    return app


def _answerer(cluster_view: ClusterView) -> Answer:
    """Answers from a detached copy of ``cluster_view``; the GPU map reused while fresh."""
    reused: Fresh[bytes] = Fresh()

    async def answer(
        build: Callable[..., T], kind: type[T] | Any, *args: object, reuse: str = ""
    ) -> Response:
        adapter: TypeAdapter[T] = TypeAdapter(kind)

        async def compute() -> bytes:
            frozen = cluster_view.detached()  # in the loop; built in a worker thread
            return await run_in_threadpool(lambda: adapter.dump_json(build(frozen, *args)))

        body = await (reused.get(reuse, compute) if reuse else compute())
        return Response(body, media_type="application/json")

    return answer


async def _cluster_wide(request: Request, view_name: str) -> None:
    """403 unless the reader may list pods in every namespace (the view shows all of them)."""
    await require_cluster_wide(access_of(request), view_name)


def _cluster_routes(cluster_view: ClusterView, answer: Answer) -> APIRouter:
    """The cluster, its GPU map, pending pods and why one of them waits."""
    router = APIRouter()

    @router.get("/api/v1/cluster", tags=["cluster"], response_model=Cluster)
    async def get_cluster(request: Request) -> Response:
        """Summary: nodes, GPUs, shares used, pods placed and pending by reason (cluster-wide)."""
        await _cluster_wide(request, "/api/v1/cluster")
        return await answer(view.cluster, Cluster)

    @router.get("/api/v1/nodes", tags=["cluster"], response_model=list[Node])
    async def get_nodes(request: Request) -> Response:
        """Every node with its GPUs and each GPU's shares (cluster-wide)."""
        await _cluster_wide(request, "/api/v1/nodes")
        return await answer(view.nodes, list[Node], reuse="nodes")

    @router.get("/api/v1/contention", tags=["cluster"], response_model=Contention)
    async def get_contention(request: Request) -> Response:
        """Contended GPUs, the shares slowed on them and each class's part (cluster-wide)."""
        await _cluster_wide(request, "/api/v1/contention")
        return await answer(contention, Contention)

    @router.get("/api/v1/pending", tags=["pods"], response_model=list[PendingPod])
    async def get_pending(request: Request, namespace: NamespaceQuery) -> Response:
        """Pending pods in scheduling order, with the scheduler's reason (reader's namespaces)."""
        frozen = cluster_view.detached()
        waiting = await run_in_threadpool(view.pending, frozen)
        shown = await shown_namespaces(
            access_of(request), namespace, (namespace_of(p.pod) for p in waiting)
        )
        chosen = [p for p in waiting if shows(shown, p.pod)]
        return Response(_PENDING.dump_json(chosen), media_type="application/json")

    @router.get(
        "/api/v1/pending/{namespace}/{name}",
        tags=["pods"],
        response_model=Explanation,
        responses={
            403: {"description": "The reader may not list pods in the namespace"},
            404: {"description": "The pod is not pending"},
        },
    )
    async def get_explanation(
        request: Request,
        namespace: Annotated[str, Path(max_length=63, pattern=NAME)],
        name: Annotated[str, Path(max_length=253, pattern=NAME)],
    ) -> Response:
        """Why a pod is pending, its place in the queue and what would have to free up."""
        access = access_of(request)
        await shown_namespaces(access, [namespace], ())
        frozen = cluster_view.detached()
        try:
            explanation = await run_in_threadpool(explain, frozen, f"{namespace}/{name}")
        except NotPendingError as error:
            raise HTTPException(status_code=404, detail=str(error)) from None
        redacted = await redact_holders(access, explanation)
        return Response(_EXPLANATION.dump_json(redacted), media_type="application/json")

    return router


def _quota_routes(cluster_view: ClusterView, answer: Answer) -> APIRouter:
    """Teams, pools and queues (cluster-wide)."""
    router = APIRouter()

    @router.get("/api/v1/teams", tags=["quota"], response_model=list[Team])
    async def get_teams(request: Request) -> Response:
        """GPU units held and pods pending per team, the queue its pods are charged to (all)."""
        await _cluster_wide(request, "/api/v1/teams")
        return await answer(view.teams, list[Team])

    @router.get("/api/v1/pools", tags=["quota"])
    async def get_pools(request: Request) -> list[Pool]:
        """GPUPools with their capacity and allocation (cluster-wide)."""
        await _cluster_wide(request, "/api/v1/pools")
        return cluster_view.pools()

    @router.get("/api/v1/queues", tags=["quota"])
    async def get_queues(request: Request) -> list[Queue]:
        """GPUQueues with their quota and use (cluster-wide)."""
        await _cluster_wide(request, "/api/v1/queues")
        return cluster_view.queues()

    return router


def _governance_routes(record_source: RecordSource | None) -> APIRouter:
    """Governance actions, the audit trail and cost, of the reader's namespaces."""
    router = APIRouter()

    async def recorded(request: Request, asked: list[str]) -> records.Namespaces:
        present = await records.recorded_namespaces(record_source) if not asked else ()
        return await shown_namespaces(access_of(request), asked, present)

    @router.get("/api/v1/governance/actions", tags=["governance"], responses=_FORBIDDEN)
    async def get_actions(
        request: Request,
        namespace: NamespaceQuery,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> Records:
        """The latest governance actions (the reader's namespaces)."""
        return await records.actions(record_source, limit, await recorded(request, namespace))

    @router.get("/api/v1/audit", tags=["governance"], responses=_FORBIDDEN)
    async def get_audit(
        request: Request,
        namespace: NamespaceQuery,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> Records:
        """The latest audit entries (the reader's namespaces; cluster-scoped ones cluster-wide)."""
        return await records.audit(record_source, limit, await recorded(request, namespace))

    @router.get("/api/v1/cost", tags=["governance"], responses=_FORBIDDEN)
    async def get_cost(request: Request, namespace: NamespaceQuery) -> Cost:
        """GPU-hours per team over the last 30 days (of the reader's namespaces' pods)."""
        return await records.cost(record_source, await recorded(request, namespace))

    return router


_PENDING: TypeAdapter[list[PendingPod]] = TypeAdapter(list[PendingPod])
_EXPLANATION: TypeAdapter[Explanation] = TypeAdapter(Explanation)
_FORBIDDEN: dict[int | str, dict[str, Any]] = {
    403: {"description": "The reader may not list pods in a namespace it asked for"}
}


def create_face(
    cluster_view: ClusterView,
    authorizer: Authorizer | None,
    record_source: RecordSource | None = None,
    *,
    insecure_local: bool = False,
    congestion: CongestionSource | None = None,
) -> ASGIApp:
    """The API and dashboard for readers the cluster authenticates (and loopback if told)."""
    app = create_api(cluster_view, record_source, congestion)
    return RequireReader(app, authorizer, insecure_local=insecure_local)


def live_face(
    reader: SchedulerReader,
    api: KubeAPI,
    record_source: RecordSource | None = None,
    *,
    insecure_local: bool = False,
    audience: str = API_AUDIENCE,
) -> ASGIApp:
    """A live control plane's face: its scheduler's read view, tokens checked by its cluster."""
    authorizer = ClusterAuthorizer(api, audience=audience)
    return create_face(
        LiveView(reader),
        authorizer,
        record_source,
        insecure_local=insecure_local,
        congestion=reader.congestion,
    )
