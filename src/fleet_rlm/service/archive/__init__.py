"""A session's portable archive: exported, read and imported."""
