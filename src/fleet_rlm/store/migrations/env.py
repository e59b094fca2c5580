"""Alembic environment, configured in code: :func:`fleet_rlm.store.database.migrate` hands it an open
connection, so no ``alembic.ini`` is needed and the migrations ship inside the package."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from fleet_rlm.store.tables import Base


def run_migrations(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run Fleet's migrations through fleet_rlm.store.database.migrate()")
run_migrations(connection)
