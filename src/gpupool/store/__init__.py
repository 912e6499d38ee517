"""The audit and accounting store: SQLAlchemy Core on SQLite (default) or PostgreSQL.

What is written: audit events (every bind, preemption, reclaim, cleanup, rejection and policy
change, with the deciding values), allocation intervals (for GPU-hours) and optional usage
samples (for efficiency). Each record carries a client-made idempotency key, unique in its
table, and every write is an "insert, on conflict do nothing" (or a guarded update), so a batch
retried after an ambiguous failure (the commit may or may not have landed) is never written
twice. :class:`~gpupool.store.writer.StoreWriter` buffers records, writes them in batches and
retries a failed batch until it lands, so a database restart loses nothing.

Modules: ``records`` (the record types and their keys), ``tables`` (the schema), ``engine``
(URLs, engines, migrations), ``writes`` (the idempotent statements), ``writer`` (buffer and
retry), ``queries`` (reads for the CLI and the reports). SQLAlchemy, Alembic and the drivers
load only when this package is used (``pip install 'gpupool[store]'``, plus ``[postgres]``).
"""
