"""Durable state: sessions, turns, events, files and memory in SQL (SQLite or PostgreSQL), bytes on disk."""

from fleet_rlm.store.blobs import BlobStore, TooLarge
from fleet_rlm.store.database import Database, database_url
from fleet_rlm.store.errors import Conflict, Invalid, NotFound, StoreError
from fleet_rlm.store.records import (
    Claimed,
    FileChanges,
    FileRecord,
    Interrupting,
    LabelRecord,
    LeaseRenewal,
    MemoryRecord,
    NewTurn,
    ProgramRecord,
    Queued,
    ReplayRecord,
    SessionRecord,
    TurnCommit,
    TurnEnd,
    TurnRecord,
    TurnStart,
)
from fleet_rlm.store.store import Store

__all__ = [
    "BlobStore",
    "Claimed",
    "Conflict",
    "Database",
    "FileChanges",
    "FileRecord",
    "Interrupting",
    "Invalid",
    "LabelRecord",
    "LeaseRenewal",
    "MemoryRecord",
    "NewTurn",
    "NotFound",
    "ProgramRecord",
    "Queued",
    "ReplayRecord",
    "SessionRecord",
    "Store",
    "StoreError",
    "TooLarge",
    "TurnCommit",
    "TurnEnd",
    "TurnRecord",
    "TurnStart",
    "database_url",
]
