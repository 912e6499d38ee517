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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import FastAPI, HTTPException, Path, Query, Response
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp

from gpupool.api import records, view
from gpupool.api.auth import Authorizer, ClusterAuthorizer, RequireClusterReader
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
from gpupool.api.sources import LiveView
from gpupool.api.view import ClusterView
from gpupool.kube.api import KubeAPI
from gpupool.kube.live import LiveScheduler

NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
"""A Kubernetes object name (DNS subdomain characters)."""

T = TypeVar("T")


def create_api(cluster_view: ClusterView, record_source: RecordSource | None = None) -> FastAPI:
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

    @app.get("/api/v1/cluster", tags=["cluster"], response_model=Cluster)
    async def get_cluster() -> Response:
        """Summary: nodes, GPUs, shares used, pods placed and pending by reason."""
        return await answer(view.cluster, Cluster)

    @app.get("/api/v1/nodes", tags=["cluster"], response_model=list[Node])
    async def get_nodes() -> Response:
        """Every node with its GPUs and each GPU's shares."""
        return await answer(view.nodes, list[Node], reuse="nodes")

    @app.get("/api/v1/pending", tags=["pods"], response_model=list[PendingPod])
    async def get_pending() -> Response:
        """Pending pods in scheduling order, with the scheduler's reason."""
        return await answer(view.pending, list[PendingPod])

    @app.get(
        "/api/v1/pending/{namespace}/{name}",
        tags=["pods"],
        response_model=Explanation,
        responses={404: {"description": "The pod is not pending"}},
    )
    async def get_explanation(
        namespace: Annotated[str, Path(max_length=63, pattern=NAME)],
        name: Annotated[str, Path(max_length=253, pattern=NAME)],
    ) -> Response:
        """Why a pod is pending, its place in the queue and what would have to free up."""
        try:
            return await answer(explain, Explanation, f"{namespace}/{name}")
        except NotPendingError as error:
            raise HTTPException(status_code=404, detail=str(error)) from None

    @app.get("/api/v1/teams", tags=["quota"], response_model=list[Team])
    async def get_teams() -> Response:
        """GPU share held and pods pending per team (queue label or namespace)."""
        return await answer(view.teams, list[Team])

    @app.get("/api/v1/pools", tags=["quota"])
    async def get_pools() -> list[Pool]:
        """GPUPools with their capacity and allocation."""
        return cluster_view.pools()

    @app.get("/api/v1/queues", tags=["quota"])
    async def get_queues() -> list[Queue]:
        """GPUQueues with their quota and use."""
        return cluster_view.queues()

    @app.get("/api/v1/governance/actions", tags=["governance"])
    async def get_actions(limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Records:
        """The latest governance actions."""
        return records.actions(record_source, limit)

    @app.get("/api/v1/audit", tags=["governance"])
    async def get_audit(limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Records:
        """The latest audit entries."""
        return records.audit(record_source, limit)

    @app.get("/api/v1/cost", tags=["governance"])
    async def get_cost() -> Cost:
        """GPU-hours per team."""
        return records.cost(record_source)

    add_dashboard(app, cluster_view, record_source)
    return app


def create_face(
    cluster_view: ClusterView,
    authorizer: Authorizer | None,
    record_source: RecordSource | None = None,
) -> ASGIApp:
    """The API and dashboard, open to loopback and to readers the cluster authorizes."""
    return RequireClusterReader(create_api(cluster_view, record_source), authorizer)


def live_face(scheduler: LiveScheduler, api: KubeAPI) -> ASGIApp:
    """The face of a live control plane: its scheduler's cache, tokens checked by its cluster."""
    return create_face(LiveView(scheduler), ClusterAuthorizer(api))
