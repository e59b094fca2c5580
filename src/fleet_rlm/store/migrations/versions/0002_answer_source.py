"""How a turn's answer was reached, and why it is unverified when it is.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("answer_source", sa.String(16), nullable=True))
        batch.add_column(sa.Column("unverified_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("unverified_reason")
        batch.drop_column("answer_source")
