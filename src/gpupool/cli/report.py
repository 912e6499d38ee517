"""``gpupool report cost``: GPU-hours, GPU memory GiB-hours and efficiency per team.

The numbers come from :mod:`gpupool.governance.accounting` over the store's allocation
intervals (:mod:`gpupool.store.cost`); the table goes to the terminal, ``--csv`` and ``--html``
write files.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.options import fail
from gpupool.cli.store_options import DbOption, parse_time, run_on_store

report_app = typer.Typer(help="Reports from the audit and accounting store.", no_args_is_help=True)
GROUPINGS = ("queue", "namespace", "pool", "pod")


@report_app.command("cost")
def cost(
    db: DbOption,
    start: Annotated[str, typer.Option("--from", help="Window start (ISO 8601, UTC).")],
    end: Annotated[str, typer.Option("--to", help="Window end (ISO 8601, UTC, or now).")] = "now",
    by: Annotated[str, typer.Option(help="Group by queue, namespace, pool or pod.")] = "queue",
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write a CSV file.")] = None,
    html_out: Annotated[
        Path | None, typer.Option("--html", help="Write an HTML page with a chart per group.")
    ] = None,
) -> None:
    """GPU-hours (GPU units), GPU memory GiB-hours and efficiency per group over a window."""
    from gpupool.cli.cost_output import print_table, write_csv, write_html
    from gpupool.governance.accounting import GroupBy
    from gpupool.store.cost import cost_report

    now = datetime.now(UTC)
    window_start, window_end = parse_time("--from", start, now), parse_time("--to", end, now)
    if window_end <= window_start:
        raise fail(f"--to: {window_end.isoformat()} is not after --from {window_start.isoformat()}")
    if by not in GROUPINGS:
        raise fail(f"--by: unknown grouping {by!r}; choose one of {', '.join(GROUPINGS)}")
    grouping = GroupBy(by)
    report = run_on_store(
        db,
        lambda engine: cost_report(engine, window_start, window_end, grouping, now),
        migrate=False,
    )
    print_table(report)
    if csv_out is not None:
        write_csv(report, csv_out)
        typer.echo(f"wrote {csv_out}", err=True)
    if html_out is not None:
        try:
            write_html(report, html_out)
        except RuntimeError as exc:
            raise fail(str(exc)) from None
        typer.echo(f"wrote {html_out}", err=True)
