"""What sandbox code may ask of the host through its tools, and how Fleet checks every call."""

from fleet_rlm.engine.bridge.guard import BridgeGuard

__all__ = ["BridgeGuard"]
