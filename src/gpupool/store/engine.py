"""Store URLs, engines and schema migrations.

The database is chosen by a URL: ``sqlite+aiosqlite:///path/gpupool.db`` (the embedded default)
or ``postgresql+asyncpg://user@host/db`` (production, several replicas). Plain ``sqlite://`` and
``postgresql://`` URLs get the async driver filled in; any other URL is refused with the field
named, rather than failing later inside a driver.

SQLite runs in WAL mode (readers do not block the writer) with a busy timeout, so a short lock
held by another process is waited out instead of failing the batch. WAL needs a local disk
(not NFS).

:func:`open_store` upgrades the schema to the newest migration when it opens the store, so a new
release starts on an old database without a manual step; ``gpupool db upgrade --url URL`` does
the same by hand. On PostgreSQL the upgrade holds an advisory lock, so replicas starting
together do not race to create the same tables.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

if TYPE_CHECKING:
    from alembic.config import Config

DEFAULT_URL = "sqlite+aiosqlite:///gpupool.db"
URL_ENV = "GPUPOOL_DB_URL"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}
_DRIVER_PACKAGES = {"sqlite+aiosqlite": "aiosqlite", "postgresql+asyncpg": "asyncpg"}
_EXTRAS = {"sqlite+aiosqlite": "store", "postgresql+asyncpg": "postgres"}
_UPGRADE_LOCK = 0x67707570  # "gpup": the advisory lock key of schema upgrades


class StoreURLError(ValueError):
    """The store URL cannot be used; the message says why."""


def store_url(url: str) -> sa.URL:
    """The URL with its async driver, checked.

    Raises:
        StoreURLError: The URL does not parse, names another database, or its driver is not
            installed.
    """
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise StoreURLError(f"cannot read {url!r} as a database URL") from None
    driver = _DRIVERS.get(parsed.drivername)
    if driver is None:
        raise StoreURLError(
            f"{parsed.drivername!r} is not supported; use sqlite+aiosqlite:///PATH "
            "or postgresql+asyncpg://USER@HOST/DB"
        )
    if importlib.util.find_spec(_DRIVER_PACKAGES[driver]) is None:
        raise StoreURLError(
            f"the {_DRIVER_PACKAGES[driver]} driver is missing; pip install "
            f"'gpupool[{_EXTRAS[driver]}]'"
        )
    if driver.startswith("sqlite") and not parsed.database:
        raise StoreURLError("a SQLite URL needs a file: sqlite+aiosqlite:///PATH")
    return parsed.set(drivername=driver)


def create_engine(url: str | sa.URL, *, busy_timeout_ms: int = 5000) -> AsyncEngine:
    """An async engine for ``url`` (see :func:`store_url`).

    Args:
        url: The store URL.
        busy_timeout_ms: How long SQLite waits for another writer's lock before failing.
    """
    parsed = store_url(url) if isinstance(url, str) else url
    engine = create_async_engine(parsed, pool_pre_ping=True)
    if parsed.get_backend_name() == "sqlite":

        @sa.event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cursor.close()

    return engine


def _alembic_config(connection: sa.Connection) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def _upgrade(connection: sa.Connection, revision: str) -> None:
    from alembic import command

    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _UPGRADE_LOCK})
    command.upgrade(_alembic_config(connection), revision)


def _current(connection: sa.Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Migrate the schema to ``revision`` (the newest by default), in one transaction."""
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade, revision)


async def current_revision(engine: AsyncEngine) -> str | None:
    """The schema's migration revision; ``None`` for an empty database."""
    async with engine.connect() as connection:
        return await connection.run_sync(_current)


def head_revision() -> str:
    """The newest migration shipped with this release."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None, "the package ships its migrations"
    return head


async def open_store(url: str, *, migrate: bool = True, busy_timeout_ms: int = 5000) -> AsyncEngine:
    """An engine for ``url``, with the schema upgraded to the newest migration first.

    Args:
        url: The store URL.
        migrate: Upgrade the schema (the default); ``False`` leaves it as it is.
        busy_timeout_ms: How long SQLite waits for another writer's lock.
    """
    engine = create_engine(url, busy_timeout_ms=busy_timeout_ms)
    if migrate:
        try:
            await upgrade(engine)
        except BaseException:
            await engine.dispose()
            raise
    return engine
