"""Turns whose engine runs in processes of their own (``worker.turn_processes``): see
:mod:`fleet_rlm.service.turns.processes.processes`."""

from fleet_rlm.service.turns.processes.processes import TurnProcesses

__all__ = ["TurnProcesses"]
