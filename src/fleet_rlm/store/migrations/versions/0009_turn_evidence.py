"""The evidence of a turn's answer: lines printed by code that ran without error that state its figures.

Revision ID: 0009_turn_evidence
Revises: 0008_kernel_reset
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009_turn_evidence"
down_revision = "0008_kernel_reset"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("turns", sa.Column("evidence", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("evidence")
