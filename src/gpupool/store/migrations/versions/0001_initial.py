"""The first schema: audit events, allocations and usage samples.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "allocations",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("pod_uid", sa.String(length=253), server_default="", nullable=False),
        sa.Column("namespace", sa.String(length=253), server_default="", nullable=False),
        sa.Column("name", sa.String(length=253), server_default="", nullable=False),
        sa.Column("queue", sa.String(length=253), server_default="", nullable=False),
        sa.Column("pool", sa.String(length=253), server_default="", nullable=False),
        sa.Column("node", sa.String(length=253), server_default="", nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("units", sa.Float(), nullable=False),
        sa.Column("memory_gib", sa.Float(), nullable=False),
        sa.Column("start_us", sa.BigInteger(), nullable=False),
        sa.Column("end_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_allocations")),
        sa.UniqueConstraint("key", name=op.f("uq_allocations_key")),
    )
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_allocations_end_us"), ["end_us"], unique=False)
        batch_op.create_index(batch_op.f("ix_allocations_pod_uid"), ["pod_uid"], unique=False)
        batch_op.create_index(batch_op.f("ix_allocations_queue"), ["queue"], unique=False)
        batch_op.create_index(batch_op.f("ix_allocations_start_us"), ["start_us"], unique=False)

    op.create_table(
        "audit_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("time_us", sa.BigInteger(), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("object_kind", sa.String(length=253), server_default="", nullable=False),
        sa.Column("namespace", sa.String(length=253), server_default="", nullable=False),
        sa.Column("name", sa.String(length=253), server_default="", nullable=False),
        sa.Column("uid", sa.String(length=253), server_default="", nullable=False),
        sa.Column("tenant", sa.String(length=253), server_default="", nullable=False),
        sa.Column("pool", sa.String(length=253), server_default="", nullable=False),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        sa.Column("decision_values", sa.JSON(), nullable=False),
        sa.Column("actor", sa.String(length=253), server_default="", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
        sa.UniqueConstraint("key", name=op.f("uq_audit_events_key")),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_events_action"), ["action"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_tenant"), ["tenant"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_time_us"), ["time_us"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_uid"), ["uid"], unique=False)

    op.create_table(
        "usage_samples",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("pod_uid", sa.String(length=253), server_default="", nullable=False),
        sa.Column("time_us", sa.BigInteger(), nullable=False),
        sa.Column("sm_percent", sa.Float(), nullable=False),
        sa.Column("memory_used_gib", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_samples")),
        sa.UniqueConstraint("key", name=op.f("uq_usage_samples_key")),
    )
    with op.batch_alter_table("usage_samples", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_usage_samples_pod_uid"), ["pod_uid"], unique=False)
        batch_op.create_index(batch_op.f("ix_usage_samples_time_us"), ["time_us"], unique=False)


def downgrade() -> None:
    """Undo this revision."""
    with op.batch_alter_table("usage_samples", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_usage_samples_time_us"))
        batch_op.drop_index(batch_op.f("ix_usage_samples_pod_uid"))

    op.drop_table("usage_samples")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_events_uid"))
        batch_op.drop_index(batch_op.f("ix_audit_events_time_us"))
        batch_op.drop_index(batch_op.f("ix_audit_events_tenant"))
        batch_op.drop_index(batch_op.f("ix_audit_events_action"))

    op.drop_table("audit_events")
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_allocations_start_us"))
        batch_op.drop_index(batch_op.f("ix_allocations_queue"))
        batch_op.drop_index(batch_op.f("ix_allocations_pod_uid"))
        batch_op.drop_index(batch_op.f("ix_allocations_end_us"))

    op.drop_table("allocations")
