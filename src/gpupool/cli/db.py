"""``gpupool db upgrade``: migrate the store's schema to this release's newest revision.

Every component that writes to the store also upgrades it when it starts
(:func:`gpupool.store.engine.open_store`); this command does it ahead of time, for example
from a deployment hook before the new release starts.
"""

from __future__ import annotations

from typing import Annotated

import typer

db_app = typer.Typer(help="The audit and accounting store.", no_args_is_help=True)


@db_app.command("upgrade")
def upgrade(
    url: Annotated[
        str,
        typer.Option(
            "--url",
            "--db",
            envvar="GPUPOOL_DB_URL",
            help="Store URL: sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST/DB.",
        ),
    ],
) -> None:
    """Create or migrate the store's tables to the newest schema."""
    from sqlalchemy.ext.asyncio import AsyncEngine

    from gpupool.cli.store_options import run_on_store
    from gpupool.store.engine import current_revision

    async def revision(engine: AsyncEngine) -> str | None:
        return await current_revision(engine)

    typer.echo(f"schema at revision {run_on_store(url, revision, migrate=True, option='--url')}")
