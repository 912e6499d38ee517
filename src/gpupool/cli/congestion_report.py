"""``gpupool report congestion``: the congestion-by-class table, from ``/api/v1/congestion``.

Who keeps the others waiting, in minutes: what each class and queue imposed on other classes
(and by which cause most), what its own pods waited on itself, the GPU-hours it held idle.
The rules that attribute a wait are :mod:`gpupool.governance.congestion`'s (docs/congestion.md).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from gpupool.cli.face import CaOption, ServerOption, TokenOption, _client, _get

NOT_MEASURED = "-"
"""How a class's contention share shows where no contention source exists."""


def congestion_table(body: dict[str, Any]) -> Table:
    """The "congestion by class" table of an ``/api/v1/congestion`` answer."""
    table = Table(title="Congestion by class")
    table.add_column("class")
    table.add_column("queue")
    for column in ("imposed on others (min)", "mostly by", "self-imposed (min)", "idle GPU-h"):
        table.add_column(column, justify="right")
    table.add_column("contention share", justify="right")
    for row in body["classes"]:
        causes = row["imposed_by_cause"]
        top = max(causes, key=causes.get) if causes else NOT_MEASURED
        share = row["contention_share"]
        table.add_row(
            row["workload_class"],
            row["queue"],
            f"{row['imposed_seconds'] / 60:.1f}",
            top,
            f"{row['self_imposed_seconds'] / 60:.1f}",
            f"{row['idle_gpu_hours']:.2f}",
            f"{share:.0%}" if share is not None else NOT_MEASURED,
        )
    return table


def report_congestion(
    server: ServerOption = "", token: TokenOption = "", ca_file: CaOption = ""
) -> None:
    """Pending time each class and queue imposes on the others, and its idle GPU-hours."""
    body = _get(_client(server, token, ca_file), "/api/v1/congestion")
    console = Console()
    console.print(congestion_table(body))
    unattributed = sum(body["unattributed_seconds"].values())
    console.print(
        f"{body['pending_seconds'] / 60:.1f} pending minutes charged, "
        f"{unattributed / 60:.1f} to no class.",
        markup=False,
    )
