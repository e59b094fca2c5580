"""Sandboxes the service keeps: the warm pool and the sessions' kernels, with their state."""
