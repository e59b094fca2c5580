"""Choosing a turn's route from its mode, and running it.

A strict mode (``rlm``, ``flex``, ``direct``) is the route. ``hybrid`` asks the triage predictor.
``direct`` cannot see files, so a turn with files never takes it: asked for strictly, the turn is
refused; chosen by triage, it becomes ``rlm`` with a warning. A triage error (including a reply
that is not a route) also falls back to ``rlm`` with a warning. The choice is the
``route.selected`` event. See docs/routes.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast, get_args

from fleet_rlm.engine.budget import budget_error_in, one_line
from fleet_rlm.engine.modes.context import RouteContext
from fleet_rlm.engine.modes.direct import run_direct
from fleet_rlm.engine.modes.flex import run_flex
from fleet_rlm.engine.modes.rlm import run_rlm
from fleet_rlm.engine.modes.triage import triage
from fleet_rlm.protocol.payloads import RouteSelected, TurnWarning
from fleet_rlm.protocol.routes import Mode, Route

MODES: tuple[str, ...] = get_args(Mode)
ROUTES: dict[str, Callable[[RouteContext], str]] = {"direct": run_direct, "flex": run_flex, "rlm": run_rlm}
FALLBACK: Route = "rlm"


class RouteRefused(ValueError):
    """The requested mode cannot serve this turn; the message says why and what to use instead."""


@dataclass(frozen=True)
class RouteChoice:
    route: Route
    reason: str


def select_route(ctx: RouteContext, mode: str) -> RouteChoice:
    """Pick the route for ``mode`` and emit ``route.selected``. Raises RouteRefused."""
    if mode not in MODES:
        raise RouteRefused(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "direct" and ctx.has_files:
        raise RouteRefused(
            "mode direct cannot see workspace files and this turn has files; use mode hybrid, rlm or flex"
        )
    choice = _triage(ctx) if mode == "hybrid" else RouteChoice(cast(Route, mode), f"mode {mode} was requested")
    ctx.trace.emitter.emit(RouteSelected(route=choice.route, reason=choice.reason, mode=cast(Mode, mode)))
    return choice


def run_route(ctx: RouteContext, choice: RouteChoice) -> str:
    return ROUTES[choice.route](ctx)


def _triage(ctx: RouteContext) -> RouteChoice:
    try:
        verdict = triage(ctx)
    except Exception as exc:
        if ctx.budget.cancelled or budget_error_in(exc) is not None:
            raise  # the turn is over, not the triage
        _warn(ctx, f"triage failed ({one_line(exc)}); using the {FALLBACK} route")
        return RouteChoice(FALLBACK, "triage failed, so the turn takes the default route")
    if verdict.route == "direct" and ctx.has_files:
        _warn(ctx, f"triage chose direct, which cannot see the workspace files; using the {FALLBACK} route")
        return RouteChoice(FALLBACK, f"the turn has files, which direct cannot see (triage: {verdict.reason})")
    return RouteChoice(verdict.route, verdict.reason)


def _warn(ctx: RouteContext, message: str) -> None:
    ctx.trace.emitter.emit(TurnWarning(message=message))
