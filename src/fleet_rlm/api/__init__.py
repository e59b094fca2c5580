"""The HTTP API (FastAPI, under /api/v1) over the durable service, its server and a Python client."""
