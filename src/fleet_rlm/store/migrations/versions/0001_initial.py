"""Sessions, turns, events and files.

Revision ID: 0001
Revises:
Create Date: 2025-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
ACTIVE = sa.text("status IN ('queued', 'running')")


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("name", sa.String(64), nullable=True),
        sa.Column("title", sa.String(200), nullable=True),
        sa.Column("mode", sa.String(16), nullable=True),
        sa.Column("settings", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sessions"),
        sa.UniqueConstraint("name", name="uq_sessions_name"),
    )
    op.create_table(
        "turns",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("session_id", sa.String(40), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("context_paths", JSON, nullable=False),
        sa.Column("options", JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("usage", JSON, nullable=False),
        sa.Column("artifacts", JSON, nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("runner", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name="fk_turns_session_id_sessions", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_turns"),
        sa.UniqueConstraint("session_id", "position", name="uq_turns_session_id_position"),
        sa.UniqueConstraint("session_id", "idempotency_key", name="uq_turns_session_id_idempotency_key"),
    )
    op.create_index(
        "ix_turns_one_active_per_session",
        "turns",
        ["session_id"],
        unique=True,
        sqlite_where=ACTIVE,
        postgresql_where=ACTIVE,
    )
    op.create_index("ix_turns_status", "turns", ["status"])
    op.create_table(
        "events",
        sa.Column("turn_id", sa.String(40), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("span_id", sa.String(64), nullable=False),
        sa.Column("parent_span_id", sa.String(64), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["turn_id"], ["turns.id"], name="fk_events_turn_id_turns", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("turn_id", "seq", name="pk_events"),
    )
    op.create_table(
        "files",
        sa.Column("session_id", sa.String(40), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("media_type", sa.String(200), nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("turn_id", sa.String(40), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name="fk_files_session_id_sessions", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("session_id", "path", name="pk_files"),
    )


def downgrade() -> None:
    op.drop_table("files")
    op.drop_table("events")
    op.drop_index("ix_turns_status", table_name="turns")
    op.drop_index("ix_turns_one_active_per_session", table_name="turns")
    op.drop_table("turns")
    op.drop_table("sessions")
