"""A real PostgreSQL server for the store's tests, and a store URL per database.

The server is Debian's PostgreSQL, started by the tests in a temporary folder (initdb, then
``pg_ctl start`` on a free loopback port) and stopped after the session. PostgreSQL refuses to
run as root, so as root (CI) the server runs as the ``postgres`` system user through
``runuser``, in a folder that user owns. Missing binaries fail the tests with how to install
them: nothing skips.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gpupool.devcluster.postgres import PostgresServer, throwaway_postgres
from gpupool.store.engine import open_store


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A running PostgreSQL server for the whole session."""
    with throwaway_postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store: a SQLite file, or a new database on the PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'gpupool.db'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.url(server.create_database())


@pytest.fixture
async def engine(store_url: str) -> AsyncIterator[AsyncEngine]:
    """The store at ``store_url``, migrated to the newest schema."""
    engine = await open_store(store_url)
    try:
        yield engine
    finally:
        await engine.dispose()
