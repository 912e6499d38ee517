"""The schema, as SQLAlchemy Core tables (the migrations in ``migrations/`` create it).

Times are integer microseconds since the Unix epoch (UTC): exact, indexable and read the same
on SQLite and PostgreSQL. Every table has a surrogate id for ordering and a unique ``key``, the
client's idempotency key, which is what makes a retried batch harmless.
"""

from __future__ import annotations

import sqlalchemy as sa

from gpupool.store.records import KEY_LENGTH, NAME_LENGTH

metadata = sa.MetaData(
    naming_convention={
        "pk": "pk_%(table_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ix": "ix_%(table_name)s_%(column_0_name)s",
    }
)
"""Named constraints and indexes, so migrations (and SQLite's batch mode) can refer to them."""

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""64-bit ids on PostgreSQL; SQLite only autoincrements an ``INTEGER PRIMARY KEY``."""


def _name(column: str, *, index: bool = False) -> sa.Column[str]:
    return sa.Column(column, sa.String(NAME_LENGTH), nullable=False, server_default="", index=index)


audit_events = sa.Table(
    "audit_events",
    metadata,
    sa.Column("id", _Id, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(KEY_LENGTH), nullable=False, unique=True),
    sa.Column("time_us", sa.BigInteger, nullable=False, index=True),
    sa.Column("action", sa.String(32), nullable=False, index=True),
    _name("object_kind"),
    _name("namespace"),
    _name("name"),
    _name("uid", index=True),
    _name("tenant", index=True),
    _name("pool"),
    sa.Column("reason", sa.Text, nullable=False, server_default=""),
    sa.Column("decision_values", sa.JSON, nullable=False),
    _name("actor"),
)

allocations = sa.Table(
    "allocations",
    metadata,
    sa.Column("id", _Id, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(KEY_LENGTH), nullable=False, unique=True),
    _name("pod_uid", index=True),
    _name("namespace"),
    _name("name"),
    _name("queue", index=True),
    _name("pool"),
    _name("node"),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("units", sa.Float, nullable=False),
    sa.Column("memory_gib", sa.Float, nullable=False),
    sa.Column("start_us", sa.BigInteger, nullable=False, index=True),
    sa.Column("end_us", sa.BigInteger, nullable=True, index=True),
)

usage_samples = sa.Table(
    "usage_samples",
    metadata,
    sa.Column("id", _Id, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(KEY_LENGTH), nullable=False, unique=True),
    _name("pod_uid", index=True),
    sa.Column("time_us", sa.BigInteger, nullable=False, index=True),
    sa.Column("sm_percent", sa.Float, nullable=False),
    sa.Column("memory_used_gib", sa.Float, nullable=False),
)
