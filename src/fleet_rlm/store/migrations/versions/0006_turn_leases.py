"""Turns claimed by workers under leases: when the lease ends, whether a cancel was asked for, and the
conversation an OpenAI-compatible call sent in place of the session's own history.

Revision ID: 0006_turn_leases
Revises: 0005_trace_id
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006_turn_leases"
down_revision = "0005_trace_id"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("turns", sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("turns", sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("turns", sa.Column("history", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True))
    unclaimed = sa.text("status = 'queued' AND runner IS NULL")
    op.create_index(
        "ix_turns_queued_unclaimed", "turns", ["created_at"], postgresql_where=unclaimed, sqlite_where=unclaimed
    )


def downgrade() -> None:
    op.drop_index("ix_turns_queued_unclaimed", table_name="turns")
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("history")
        batch.drop_column("cancel_requested")
        batch.drop_column("lease_expires_at")
