from __future__ import annotations

from .databases import database_url, postgres_databases, store, unmigrated_database_url

__all__ = ["database_url", "postgres_databases", "store", "unmigrated_database_url"]
