"""The cost report as a table, a CSV file and a self-contained HTML page with a chart per group.

Group names come from namespaces and queues that tenants name, so the HTML escapes every one of
them; the charts are PNGs embedded as base64, so the page opens anywhere, offline, with no CDN.
"""

from __future__ import annotations

import base64
import csv
import html
import io
from collections.abc import Iterator
from pathlib import Path

from gpupool.governance.accounting import Usage
from gpupool.store.cost import CostReport

MAX_CHARTS = 50
"""Charts drawn, for the groups with the most GPU-hours (a report by pod can have thousands)."""
COLUMNS = (
    "group", "pods", "gpu_hours", "gpu_memory_gib_hours", "sampled_gpu_hours",
    "used_gpu_hours", "gpu_efficiency", "memory_efficiency",
)  # fmt: skip


def _number(value: float | None, digits: int = 6) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def usage_cells(usage: Usage, digits: int = 6) -> list[str]:
    """One group's line, in :data:`COLUMNS` order."""
    return [
        usage.group,
        str(usage.pods),
        _number(usage.gpu_hours, digits),
        _number(usage.memory_gib_hours, digits),
        _number(usage.sampled_gpu_hours, digits),
        _number(usage.used_gpu_hours, digits),
        _number(usage.gpu_efficiency, digits),
        _number(usage.memory_efficiency, digits),
    ]


def _lines(report: CostReport) -> Iterator[Usage]:
    yield from report.groups
    yield report.total


def write_csv(report: CostReport, out: Path) -> None:
    """One row per group, then the total; efficiencies empty where no samples exist."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for usage in _lines(report):
            writer.writerow(usage_cells(usage))


def print_table(report: CostReport) -> None:
    """The report as a Rich table on stdout."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        title=f"GPU cost by {report.by.value}, {report.start.isoformat()} to "
        f"{report.end.isoformat()}"
    )
    headers = ("group", "pods", "GPU-hours", "GPU mem GiB-h", "sampled GPU-h", "used GPU-h",
               "GPU eff.", "mem eff.")  # fmt: skip
    for index, header in enumerate(headers):
        table.add_column(header, justify="left" if index == 0 else "right")
    for usage in _lines(report):
        cells = usage_cells(usage, digits=2)
        table.add_row(escape(cells[0]), *[cell or "-" for cell in cells[1:]])
    Console().print(table)


def _chart(report: CostReport, group: str) -> str:
    """A PNG, base64: GPU-hours held and used per bucket for one group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    starts = mdates.date2num([bucket.start for bucket in report.buckets])  # type: ignore[no-untyped-call]
    held = [b.usage[group].gpu_hours if group in b.usage else 0.0 for b in report.buckets]
    used = [b.usage[group].used_gpu_hours if group in b.usage else 0.0 for b in report.buckets]
    first = report.buckets[0]
    width = (first.end - first.start).total_seconds() / 86400 * 0.8  # in days, as date2num
    figure, axes = plt.subplots(figsize=(7, 2.6), dpi=90)
    axes.bar(starts, held, width=width, align="edge", color="#7aa6d8", label="held (GPU-h)")
    axes.bar(starts, used, width=width, align="edge", color="#1f4e8c", label="used (GPU-h)")
    axes.xaxis_date()
    axes.set_ylabel("GPU-hours")
    axes.legend(loc="upper right", fontsize="small")
    figure.autofmt_xdate()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def write_html(report: CostReport, out: Path) -> None:
    """A self-contained page: the table, then one chart per group (the top :data:`MAX_CHARTS`).

    Raises:
        RuntimeError: matplotlib is not installed.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("--html needs matplotlib: pip install 'gpupool[reports]'") from exc
    title = f"GPU cost by {report.by.value}: {report.start.isoformat()} to {report.end.isoformat()}"
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in usage_cells(u, 2)) + "</tr>"
        for u in _lines(report)
    )
    charted = sorted(report.groups, key=lambda u: (-u.gpu_hours, u.group))[:MAX_CHARTS]
    charts = "\n".join(
        f"<section><h2>{html.escape(u.group)}</h2><p>{u.gpu_hours:.2f} GPU-hours, "
        f"{u.memory_gib_hours:.2f} GPU memory GiB-hours</p>"
        f'<img alt="GPU-hours of {html.escape(u.group, quote=True)}" '
        f'src="data:image/png;base64,{_chart(report, u.group)}"></section>'
        for u in charted
    )
    header = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}</style></head>
<body><h1>{html.escape(title)}</h1>
<table><thead><tr>{header}</tr></thead><tbody>
{rows}
</tbody></table>
{charts}
</body></html>
"""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page)
