"""``fleet chat``: the interactive terminal client of a Fleet server (see docs/terminal.md)."""
