"""``gpupool status``, ``explain POD``, ``top`` and ``report cost``: readable tables over the API.

Each command is one or two GETs (:mod:`gpupool.cli.client`) and a Rich table; ``top`` redraws
with Rich Live until Ctrl-C (``--once`` prints one frame, for scripts and tests). The same
commands are the kubectl plugin: the ``kubectl-gpupool`` console script is this CLI, so
``kubectl gpupool status`` works once the script is on the PATH.
"""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.console import Console, Group
from rich.table import Table

from gpupool.cli.client import ApiClient, ApiClientError
from gpupool.cli.options import fail

ServerOption = Annotated[
    str,
    typer.Option(
        help="URL of the control plane's API (default: $GPUPOOL_SERVER or http://127.0.0.1:9402)."
    ),
]
TokenOption = Annotated[
    str,
    typer.Option(
        help="Bearer token for audience gpupool.io/api (default: $GPUPOOL_TOKEN; e.g. "
        "kubectl create token ACCOUNT --audience gpupool.io/api)."
    ),
]
CaOption = Annotated[
    str,
    typer.Option(
        "--ca-file",
        help="PEM CA that signed the API's certificate (default: $GPUPOOL_CA_FILE, or the "
        "system's CAs).",
    ),
]


def _client(server: str, token: str, ca_file: str) -> ApiClient:
    try:
        return ApiClient.from_options(server, token, ca_file)
    except ApiClientError as error:
        raise fail(str(error)) from None


def _get(client: ApiClient, path: str) -> Any:
    try:
        return client.get(path)
    except ApiClientError as error:
        raise fail(str(error)) from None


def _gpus(units: float) -> str:
    return f"{units:.2f}"


def status(server: ServerOption = "", token: TokenOption = "", ca_file: CaOption = "") -> None:
    """Cluster summary: nodes, GPUs, what is allocated, pending pods by reason."""
    client = _client(server, token, ca_file)
    cluster = _get(client, "/api/v1/cluster")
    teams = _get(client, "/api/v1/teams")
    summary = Table(title=f"gpupool ({cluster['source']})", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    summary.add_row("nodes", str(cluster["nodes"]))
    summary.add_row("GPUs", str(cluster["gpus"]))
    summary.add_row(
        "GPU units allocated",
        f"{_gpus(cluster['allocated_units'])} of {_gpus(cluster['capacity_units'])}",
    )
    summary.add_row("idle GPUs", str(cluster["idle_gpus"]))
    summary.add_row("pods placed", str(cluster["allocated_pods"]))
    summary.add_row("pods pending", str(cluster["pending_pods"]))
    for reason, count in cluster["pending_by_reason"].items():
        summary.add_row(f"  pending: {reason}", str(count))
    by_team = Table(title="teams")
    for column in ("team", "GPU units held", "GPU memory (GiB)", "pods", "pending"):
        by_team.add_column(column, justify="left" if column == "team" else "right")
    for team in teams:
        by_team.add_row(
            team["name"],
            _gpus(team["used_units"]),
            f"{team['used_memory_mib'] / 1024:.1f}",
            str(team["pods"]),
            str(team["pending"]),
        )
    Console().print(Group(summary, by_team))


def explain_pod(pod: str, namespace: str, server: str, token: str, ca_file: str) -> None:
    """Why ``pod`` is pending: reason, queue position, what would have to free up."""
    namespace_part, sep, name = pod.partition("/")
    if not sep:
        namespace_part, name = namespace, pod
    if not namespace_part or not name:
        raise fail(f"POD: {pod!r} is not NAME or NAMESPACE/NAME")
    client = _client(server, token, ca_file)
    path = "/api/v1/pending/" + "/".join(quote(part, safe="") for part in (namespace_part, name))
    answer = _get(client, path)
    pending = answer["pending"]
    console = Console()
    console.print(f"[bold]{pending['pod']}[/] (team {pending['team']}) is pending")
    console.print(
        f"  asks: {pending['gpu_count']} GPU(s) x {pending['gpu_milli'] / 10:g}% compute"
        + (f", {pending['gpu_memory_mib']} MiB each" if pending["gpu_memory_mib"] else "")
        + f" ({pending['kind']})"
    )
    console.print(f"  reason: {pending['reason'] or 'not tried yet'}", markup=False)
    console.print(
        f"  queue position: {pending['position']} of {answer['pending_total']}, "
        f"{pending['attempts']} attempt(s)"
    )
    console.print(
        f"  nodes of its pools it may use that could hold it when empty: "
        f"{answer['nodes_could_fit']} of {answer['nodes_total']}"
    )
    if answer.get("consolidation"):
        console.print(f"  {answer['consolidation']}", markup=False)
    if not answer["closest"]:
        console.print("  no node can ever hold it as asked: change the request")
        return
    table = Table(title="what would have to free up (closest nodes first)")
    for column in (
        "node",
        "GPUs",
        "compute to free",
        "GPU memory to free",
        "CPU",
        "memory",
        "held by",
    ):
        table.add_column(column)
    for row in answer["closest"]:
        table.add_row(
            row["node"],
            ",".join(str(g) for g in row["gpus"]),
            f"{row['milli_short'] / 10:g}%",
            f"{row['memory_short_mib']} MiB",
            f"{row['cpu_short_milli']}m",
            f"{row['memory_short_node_mib']} MiB",
            ", ".join(row["holders"]) or "-",
        )
    console.print(table)


def _top_table(nodes: list[dict[str, Any]], source: str) -> Table:
    table = Table(title=f"GPUs ({source})")
    for column in ("node", "GPU", "model", "compute", "memory", "shares"):
        table.add_column(column, justify="right" if column in ("GPU", "compute") else "left")
    for node in nodes:
        for gpu in node["gpus"]:
            memory = (
                f"{gpu['used_memory_mib'] / 1024:.1f}/{gpu['memory_mib'] / 1024:.0f} GiB"
                if gpu["memory_mib"]
                else f"{gpu['used_memory_mib'] / 1024:.1f} GiB"
            )
            shares = ", ".join(f"{s['pod']} {s['milli'] / 10:g}%" for s in gpu["shares"])
            table.add_row(
                node["name"],
                str(gpu["index"]),
                gpu["model"],
                f"{gpu['used_milli'] / 10:g}%",
                memory,
                shares or "[dim]idle[/]",
            )
    return table


def top(
    server: ServerOption = "",
    token: TokenOption = "",
    ca_file: CaOption = "",
    once: Annotated[bool, typer.Option(help="Print one frame and exit.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 2.0,
) -> None:
    """Per-GPU use, refreshed live (Ctrl-C to stop)."""
    if interval <= 0:
        raise fail("--interval: must be > 0")
    client = _client(server, token, ca_file)

    def frame() -> Table:
        source = _get(client, "/api/v1/cluster")["source"]
        return _top_table(_get(client, "/api/v1/nodes"), source)

    console = Console()
    if once:
        console.print(frame())
        return
    from rich.live import Live

    with Live(frame(), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(frame(), refresh=True)
        except KeyboardInterrupt:
            return


def report_teams(
    server: ServerOption = "", token: TokenOption = "", ca_file: CaOption = ""
) -> None:
    """GPU-hours per team (from the store), and what each team holds now, from the REST API."""
    client = _client(server, token, ca_file)
    cost = _get(client, "/api/v1/cost")
    console = Console()
    if cost["configured"]:
        table = Table(title="GPU-hours per team")
        table.add_column("team")
        table.add_column("GPU-hours", justify="right")
        for line in cost["teams"]:
            table.add_row(line["team"], f"{line['gpu_hours']:.2f}")
        console.print(table)
    else:
        console.print(f"cost: {cost['note']}", markup=False)
    now = Table(title="held now")
    now.add_column("team")
    now.add_column("GPU units", justify="right")
    for team in _get(client, "/api/v1/teams"):
        now.add_row(team["name"], _gpus(team["used_units"]))
    console.print(now)


def report_contention(
    server: ServerOption = "", token: TokenOption = "", ca_file: CaOption = ""
) -> None:
    """Contended GPUs and the shares slowed on them, as the node agents measured them."""
    body = _get(_client(server, token, ca_file), "/api/v1/contention")
    console = Console()
    if not body["gpus"]:
        console.print("no GPU contention measured")
        return
    table = Table(title="GPU contention")
    for column in ("GPU", "level", "score", "shares (slowdown)", "why"):
        table.add_column(column)
    for gpu in body["gpus"]:
        shares = ", ".join(f"{s['pod']} {s['slowdown']:.2g}x" for s in gpu["shares"])
        table.add_row(
            f"{gpu['node']}/{gpu['gpu']}",
            gpu["level"],
            f"{gpu['score']:.2f}",
            shares,
            "; ".join(gpu["reasons"]),
        )
    console.print(table)
    parts = ", ".join(f"{c or 'none'} {p:.0%}" for c, p in body["class_share"].items())
    console.print(f"share of contention by class: {parts}", markup=False)
