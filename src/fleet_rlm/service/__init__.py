"""Fleet as a durable service: sessions, files and detached turns over the store, a sandbox pool."""
