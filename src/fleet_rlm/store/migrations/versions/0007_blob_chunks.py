"""Session file bytes shared through the database, in chunks, for replicas and workers on several
machines (``worker.file_store = "database"``).

Revision ID: 0007_blob_chunks
Revises: 0006_turn_leases
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_blob_chunks"
down_revision = "0006_turn_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "blob_chunks",
        sa.Column("session_id", sa.String(40), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "sha256", "seq", name="pk_blob_chunks"),
    )


def downgrade() -> None:
    op.drop_table("blob_chunks")
