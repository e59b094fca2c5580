"""Reviewed memory: entries turns propose and the person approves, edits or rejects.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("why", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("session_id", sa.String(40), nullable=True),
        sa.Column("turn_id", sa.String(40), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reviewed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name="fk_memories_session_id_sessions", ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(["turn_id"], ["turns.id"], name="fk_memories_turn_id_turns", ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name="pk_memories"),
    )
    op.create_index("ix_memories_status", "memories", ["status"])


def downgrade() -> None:
    op.drop_index("ix_memories_status", table_name="memories")
    op.drop_table("memories")
