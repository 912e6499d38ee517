"""``gpupool demo``: the control plane on the embedded simulated cluster, with its dashboard.

The first thing a new user runs, so it needs nothing but Python: the bundled workload
(:mod:`gpupool.sim.demo.workload`) runs on the embedded cluster under the same policy engine the
live scheduler runs, at accelerated time (``--speed`` simulated seconds per second), the
dashboard is served on http://127.0.0.1:8080 (``--port``), and the terminal shows a short live
summary. ``--duration`` stops it after that many seconds (tests, recordings); Ctrl-C otherwise.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext

from rich.console import Console
from rich.table import Table

from gpupool.sim.demo.session import DemoSession, Summary

TICK = 0.5
"""Real seconds between two steps of the simulation."""
REPORT_EVERY = 5.0
"""Real seconds between two terminal summaries."""


def _clock(seconds: float) -> str:
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def summary_table(summary: Summary) -> Table:
    """The terminal's picture of the demo cluster."""
    table = Table(
        title=(
            f"t={_clock(summary.now)} simulated | {summary.allocated_units:.1f} of "
            f"{summary.capacity_units:.1f} GPU units allocated | {summary.running} running, "
            f"{summary.pending} pending, "
            f"{summary.completed} done, {summary.preemptions} preempted, "
            f"{summary.reclaims} idle reclaimed"
        ),
        title_justify="left",
    )
    table.add_column("queue")
    table.add_column("pool")
    table.add_column("used", justify="right")
    table.add_column("guaranteed", justify="right")
    table.add_column("ceiling", justify="right")
    for use in summary.queues:
        ceiling = f"{use.ceiling:g}" if use.ceiling is not None else "-"
        table.add_row(use.queue, use.pool, f"{use.used:.2f}", f"{use.guaranteed:g}", ceiling)
    return table


def report(console: Console, summary: Summary) -> None:
    """Print the summary, the commonest pending reasons and the latest decisions."""
    console.print(summary_table(summary))
    for reason, count in summary.reasons:
        console.print(f"  pending x{count}: {reason}")
    for event in summary.recent:
        console.print(f"  {_clock(event.at)} {event.action:8} {event.pod} {event.detail}")


def run_demo(
    port: int, speed: float, seed: int, duration: float, dashboard: bool, console: Console
) -> None:
    """Run the demo until ``duration`` real seconds passed (0: until interrupted)."""
    session = DemoSession(seed=seed)
    server: AbstractContextManager[str | None] = nullcontext(None)
    if dashboard:
        from gpupool.api.embedded import serve_demo

        server = serve_demo(session, port)
    with server as url:
        if url is not None:
            console.print(f"dashboard: {url}  (Ctrl-C stops the demo)")
        started = last_report = time.monotonic()
        report(console, session.summary())
        try:
            while duration <= 0 or time.monotonic() - started < duration:
                time.sleep(TICK)
                session.advance(speed * TICK)
                if time.monotonic() - last_report >= REPORT_EVERY:
                    last_report = time.monotonic()
                    report(console, session.summary())
        except KeyboardInterrupt:
            console.print("demo stopped")
