"""The dashboard: server-rendered HTML, refreshed every two seconds by htmx, no JS build step.

The page is Jinja2 templates over the same read model as the API (:mod:`gpupool.api.view`), so
what the dashboard shows cannot disagree with what ``/api/v1`` answers; like the API, it renders
from a detached copy of the view in a worker thread, never in the scheduler's loop. The live
part is one fragment (``/ui/live``) that htmx swaps in place; the GPU-hours chart is drawn by
uPlot from ``/api/v1/teams`` samples the browser collects while the page is open (the store's
cost history is at ``/api/v1/cost``). htmx and uPlot are vendored into the package
(``static/vendor``, ``scripts/vendor_js.sh``), so the dashboard works on a cluster with no way
out to a CDN. The rendered HTML is reused while fresh (:mod:`gpupool.api.reuse`).

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
from gpupool.api.records import RecordSource
from gpupool.api.reuse import Fresh
from gpupool.api.view import ClusterView

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


def _live_context(
    cluster_view: ClusterView, record_source: RecordSource | None = None
) -> dict[str, object]:
    nodes = view.nodes(cluster_view)
    teams = view.teams(cluster_view)
    shared_teams = sorted({s.team for n in nodes for g in n.gpus for s in g.shares})
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
        "actions": records.actions(record_source, ACTIONS_SHOWN),
    }


def render_page(cluster_view: ClusterView, record_source: RecordSource | None = None) -> str:
    """The whole page's HTML (``/``)."""
    return _templates.get_template("index.html").render(
        refresh=REFRESH_SECONDS, **_live_context(cluster_view, record_source)
    )


def render_live(cluster_view: ClusterView, record_source: RecordSource | None = None) -> str:
    """The live fragment's HTML (``/ui/live``)."""
    return _templates.get_template("live.html").render(**_live_context(cluster_view, record_source))


def add_dashboard(
    app: FastAPI, cluster_view: ClusterView, record_source: RecordSource | None = None
) -> None:
    """Add ``/``, ``/ui/live`` and ``/static`` to ``app`` (left out of the OpenAPI document)."""
    static = resources.files("gpupool.api") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    reused: Fresh[str] = Fresh()

    def rendered(
        render: Callable[[ClusterView, RecordSource | None], str],
    ) -> Callable[[], Awaitable[str]]:
        async def build() -> str:
            frozen = cluster_view.detached()  # in the loop; rendered in a worker thread
            return await run_in_threadpool(render, frozen, record_source)

        return build

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(await reused.get("page", rendered(render_page)))

    @app.get("/ui/live", response_class=HTMLResponse, include_in_schema=False)
    async def live(request: Request) -> HTMLResponse:
        return HTMLResponse(await reused.get("live", rendered(render_live)))
