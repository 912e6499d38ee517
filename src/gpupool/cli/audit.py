"""``gpupool audit``: who did what to which pod, when and why, from the store.

The default output is a table for a person; ``--json`` prints the events as one JSON array for
scripts (times in RFC 3339 UTC, the deciding values as they were stored).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpupool.cli.options import fail
from gpupool.cli.store_options import DbOption, parse_time, run_on_store

if TYPE_CHECKING:
    from gpupool.store.records import AuditAction, AuditEvent


_PLAIN_FIELDS = ("kind", "namespace", "name", "uid", "tenant", "pool", "reason", "actor", "key")


def audit(
    db: DbOption,
    since: Annotated[str | None, typer.Option(help="From this time (ISO 8601, UTC).")] = None,
    until: Annotated[str | None, typer.Option(help="Before this time (ISO 8601, UTC).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant (queue).")] = None,
    pod: Annotated[str | None, typer.Option(help="Only this pod: uid, name or ns/name.")] = None,
    action: Annotated[
        list[str] | None,
        typer.Option(help="Only these actions (repeat, or comma-separated): bind, preempt, ..."),
    ] = None,
    limit: Annotated[int, typer.Option(help="Most events shown, oldest first.")] = 1000,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> None:
    """Show the audit trail: binds, preemptions, reclaims, cleanups, rejections, policy changes."""
    from gpupool.store.queries import AuditQuery, audit_events_matching

    now = datetime.now(UTC)
    if limit < 1:
        raise fail("--limit: must be >= 1")
    query = AuditQuery(
        since=None if since is None else parse_time("--since", since, now),
        until=None if until is None else parse_time("--until", until, now),
        tenant=tenant,
        pod=pod,
        actions=_actions(action or []),
        limit=limit,
    )
    events = run_on_store(db, lambda engine: audit_events_matching(engine, query), migrate=False)
    if as_json:
        typer.echo(json.dumps([event_json(e) for e in events], indent=1))
    else:
        _print_table(events)


def _actions(values: list[str]) -> list[AuditAction]:
    from gpupool.store.records import AuditAction

    chosen: list[AuditAction] = []
    for name in (part.strip() for value in values for part in value.split(",")):
        try:
            chosen.append(AuditAction(name))
        except ValueError:
            choices = ", ".join(a.value for a in AuditAction)
            raise fail(f"--action: unknown action {name!r}; choose from {choices}") from None
    return chosen


def event_json(event: AuditEvent) -> dict[str, Any]:
    """One event as plain JSON."""
    plain = {name: getattr(event, name) for name in _PLAIN_FIELDS}
    return {
        "time": event.time.isoformat().replace("+00:00", "Z"),
        "action": event.action.value,
        **plain,
        "values": dict(event.values),
    }


def _print_table(events: list[AuditEvent]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{len(events)} audit event(s)")
    for column in (
        "time (UTC)", "action", "object", "tenant", "pool", "reason", "values", "actor",
    ):  # fmt: skip
        table.add_column(column, overflow="fold")
    for event in events:
        namespace = f"{event.namespace}/" if event.namespace else ""
        table.add_row(
            event.time.strftime("%Y-%m-%d %H:%M:%S"),
            event.action.value,
            escape(f"{event.kind} {namespace}{event.name}"),
            escape(event.tenant),
            escape(event.pool),
            escape(event.reason),
            escape(json.dumps(dict(event.values), separators=(",", ":"))),
            escape(event.actor),
        )
    Console().print(table)
