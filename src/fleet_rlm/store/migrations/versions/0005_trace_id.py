"""The trace id of each turn, when it was traced (the optional extra ``fleet-rlm[tracing]``).

Revision ID: 0005_trace_id
Revises: 0004_eval
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_trace_id"
down_revision = "0004_eval"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("turns", sa.Column("trace_id", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("trace_id")
