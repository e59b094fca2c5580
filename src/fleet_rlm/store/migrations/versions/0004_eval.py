"""Evaluation and optimization: replay snapshots of turns, their labels, optimized programs, and the
program version each turn ran.

Revision ID: 0004_eval
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_eval"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("turns", sa.Column("program_version", sa.String(40), nullable=True))
    op.create_table(
        "programs",
        sa.Column("version", sa.String(40), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("approved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("version", name="pk_programs"),
    )
    op.create_table(
        "turn_replays",
        sa.Column("turn_id", sa.String(40), nullable=False),
        sa.Column("session_id", sa.String(40), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name="fk_turn_replays_session_id_sessions", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["turn_id"], ["turns.id"], name="fk_turn_replays_turn_id_turns", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("turn_id", name="pk_turn_replays"),
    )
    op.create_index("ix_turn_replays_session_id", "turn_replays", ["session_id"])
    op.create_table(
        "eval_labels",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("turn_id", sa.String(40), nullable=False),
        sa.Column("session_id", sa.String(40), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("expectations", sa.JSON(), nullable=False),
        sa.Column("group", sa.String(64), nullable=False),
        sa.Column("critical", sa.Boolean(), nullable=False),
        sa.Column("benchmark", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name="fk_eval_labels_session_id_sessions", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["turn_id"], ["turns.id"], name="fk_eval_labels_turn_id_turns", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_eval_labels"),
        sa.UniqueConstraint("turn_id", name="uq_eval_labels_turn_id"),
    )
    op.create_index("ix_eval_labels_session_id", "eval_labels", ["session_id"])


def downgrade() -> None:
    op.drop_table("programs")
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("program_version")
    op.drop_index("ix_eval_labels_session_id", table_name="eval_labels")
    op.drop_table("eval_labels")
    op.drop_index("ix_turn_replays_session_id", table_name="turn_replays")
    op.drop_table("turn_replays")
