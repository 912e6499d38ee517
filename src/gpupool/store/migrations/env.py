"""Alembic's entry point: runs the migrations on the connection the caller hands in.

gpupool drives Alembic from Python (``gpupool.store.engine.upgrade``) on its own async engine,
so there is no ``alembic.ini`` and no URL here: the connection arrives in
``config.attributes["connection"]``. ``render_as_batch`` makes ALTERs work on SQLite, which
otherwise supports almost none.
"""

from __future__ import annotations

from alembic import context

from gpupool.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
