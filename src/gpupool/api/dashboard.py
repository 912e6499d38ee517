"""The dashboard: server-rendered HTML, refreshed every two seconds by htmx, no JS build step.

The page is Jinja2 templates over the same read model as the API (:mod:`gpupool.api.view`), so
what the dashboard shows cannot disagree with what ``/api/v1`` answers; like the API, it renders
from a detached copy of the view in a worker thread, never in the scheduler's loop. The live
part is one fragment (``/ui/live``) that htmx swaps in place; the GPU-hours chart is drawn by
uPlot from the store's GPU-hours per day (``/api/v1/cost`` buckets) when the control plane has a
store, and otherwise from ``/api/v1/teams`` samples the browser collects while the page is open.
htmx and uPlot are vendored into the package (``static/vendor``, ``scripts/vendor_js.sh``), so the
dashboard works on a cluster with no way out to a CDN. The rendered HTML is reused while fresh
(:mod:`gpupool.api.reuse`).

Teams are coloured from a fixed palette of distinguishable colours, in the order of their names,
so a team keeps its colour across refreshes and replicas while the set of teams stays the same
(hash-derived hues made neighbouring teams look alike).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.staticfiles import StaticFiles

from gpupool.api import records, view
from gpupool.api.contention import contention
from gpupool.api.model import Records
from gpupool.api.records import RecordSource
from gpupool.api.reuse import Fresh
from gpupool.api.view import ClusterView

Guard = Callable[[Request, str], Awaitable[None]]
"""Refuses a reader who may not see a cluster-wide view (raises a 403)."""

REFRESH_SECONDS = 2
ACTIONS_SHOWN = 20

_templates = Environment(
    loader=PackageLoader("gpupool.api", "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#ff9da7",
    "#9c755f",
    "#2f4b7c",
    "#a0cbe8",
    "#8cd17d",
)


def team_colours(teams: set[str]) -> dict[str, str]:
    """A colour per team: the palette in name order (repeating after twelve teams)."""
    return {team: PALETTE[i % len(PALETTE)] for i, team in enumerate(sorted(teams))}


def _live_context(cluster_view: ClusterView, actions: Records) -> dict[str, object]:
    nodes = view.nodes(cluster_view)
    teams = view.teams(cluster_view)
    holders = {s.team for n in nodes for g in n.gpus for s in g.shares}
    holders |= {s.team for n in nodes for s in n.mig if s.team is not None}
    shared_teams = sorted(holders)
    return {
        "cluster": view.cluster(cluster_view),
        "nodes": nodes,
        "teams": teams,
        "pending": view.pending(cluster_view),
        "pools": cluster_view.pools(),
        "queues": cluster_view.queues(),
        "colours": team_colours({*shared_teams, *(t.name for t in teams)}),
        "legend": shared_teams,
        "idle": [(n.name, g.index) for n in nodes for g in n.gpus if not g.shares],
        "actions": actions,
        "contention": contention(cluster_view),
    }


NO_ACTIONS = Records(configured=False, note=records.NO_STORE, items=[])


def render_page(cluster_view: ClusterView, actions: Records = NO_ACTIONS) -> str:
    """The whole page's HTML (``/``)."""
    return _templates.get_template("index.html").render(
        refresh=REFRESH_SECONDS, **_live_context(cluster_view, actions)
    )


def render_live(cluster_view: ClusterView, actions: Records = NO_ACTIONS) -> str:
    """The live fragment's HTML (``/ui/live``)."""
    return _templates.get_template("live.html").render(**_live_context(cluster_view, actions))


def add_dashboard(
    app: FastAPI, cluster_view: ClusterView, record_source: RecordSource | None, guard: Guard
) -> None:
    """Add ``/``, ``/ui/live`` and ``/static`` to ``app`` (left out of the OpenAPI document).

    The dashboard is a cluster-wide view: ``guard`` refuses readers who may not see every
    namespace's pods (the static files carry nothing and stay open).
    """
    static = resources.files("gpupool.api") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    reused: Fresh[str] = Fresh()

    def rendered(render: Callable[[ClusterView, Records], str]) -> Callable[[], Awaitable[str]]:
        async def build() -> str:
            frozen = cluster_view.detached()  # in the loop; rendered in a worker thread
            actions = await records.actions(record_source, ACTIONS_SHOWN, None)
            return await run_in_threadpool(render, frozen, actions)

        return build

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index(request: Request) -> HTMLResponse:
        await guard(request, "the dashboard")
        return HTMLResponse(await reused.get("page", rendered(render_page)))

    @app.get("/ui/live", response_class=HTMLResponse, include_in_schema=False)
    async def live(request: Request) -> HTMLResponse:
        await guard(request, "the dashboard")
        return HTMLResponse(await reused.get("live", rendered(render_live)))
