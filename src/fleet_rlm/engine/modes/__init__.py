"""The programs a turn can run. Each route is a function ``(RouteContext) -> str`` (the answer)."""
