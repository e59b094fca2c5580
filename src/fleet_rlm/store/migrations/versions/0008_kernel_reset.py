"""A restart of a session's kernel asked of any process: the kernels and kernel state of the session's
turns up to this position are void, wherever they are kept.

Revision ID: 0008_kernel_reset
Revises: 0007_blob_chunks
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_kernel_reset"
down_revision = "0007_blob_chunks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("kernel_reset_after", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("kernel_reset_after")
