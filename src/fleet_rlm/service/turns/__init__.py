"""Turns as the service runs them: submitted, executed, journaled and followed."""
