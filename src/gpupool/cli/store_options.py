"""Options shared by the commands that read or migrate the store (``audit``, ``report``, ``db``).

Reading commands refuse a SQLite file that does not exist, because opening it would create an
empty database and report "nothing happened" for a mistyped path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gpupool.cli.options import fail

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

T = TypeVar("T")

DbOption = Annotated[
    str,
    typer.Option(
        "--db",
        envvar="GPUPOOL_DB_URL",
        help="Store URL: sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST/DB.",
    ),
]


def parse_time(option: str, text: str, now: datetime) -> datetime:
    """An aware UTC time from ``now``, ``2026-11-30`` or ISO 8601 (no zone = UTC).

    Raises:
        typer.Exit: The value is not a time; the message names ``option``.
    """
    if text == "now":
        return now
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise fail(f"{option}: {text!r} is not 'now' or an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def run_on_store(
    url: str, work: Callable[[AsyncEngine], Awaitable[T]], *, migrate: bool, option: str = "--db"
) -> T:
    """Open the store at ``url``, run ``work`` on it, close it; errors end in one line.

    Args:
        url: The store URL.
        work: What to do with the engine.
        migrate: Upgrade the schema first (``db upgrade``); reading commands only read.
        option: The option that gave the URL, named in errors.
    """
    from gpupool.store.engine import StoreURLError, create_engine, open_store, store_url

    try:
        parsed = store_url(url)
    except StoreURLError as exc:
        raise fail(f"{option}: {exc}") from None
    sqlite = parsed.get_backend_name() == "sqlite"
    if not migrate and sqlite and not Path(str(parsed.database)).is_file():
        raise fail(f"{option}: no such SQLite file {parsed.database}")

    async def main() -> T:
        engine = await open_store(url) if migrate else create_engine(parsed)
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    try:
        return asyncio.run(main())
    except (OSError, ConnectionError) as exc:
        raise fail(f"{option}: cannot reach the database: {exc}") from None
    except Exception as exc:
        from sqlalchemy.exc import SQLAlchemyError

        if isinstance(exc, SQLAlchemyError):
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise fail(f"{option}: {first}") from None
        raise
