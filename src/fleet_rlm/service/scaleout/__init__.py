"""Many processes on one database: turn leases, wake-ups and the worker that claims queued turns."""
