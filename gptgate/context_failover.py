"""A prompt too long for one backend's context window goes to another that may hold it.

A server's "exceeds the context window" 400 (``RequestTooLargeError`` with a status:
gptgate/wire/context_window.py) says the prompt can never fit *there*; a backend with a larger
window may take it — the large tier behind a small one, a server started with a longer
``--ctx-size``. On two real llama-servers (512 and 2,048 tokens) 4 of 6 such calls of a job
failed on the smaller one while the larger was free. Such a refusal is a failover (no back-off,
no retry budget, no mark against the backend's health, and none of ``max_attempts``: with
retries off, ``max_attempts=1``, the call still moves — it is routed past a backend that can
never run it, not sent again where it failed) when an eligible backend the call has not tried
remains; when none does, or the call is pinned to its backend, it is raised as is. Each move
excludes the backend it leaves, so a call makes at most one per backend.
gptgate's own check before the send (no status) has already looked at every eligible backend.
A backend that refused the prompt so is never the call's again: a retry after the move (the
larger backend's 500) went back to it — the router prefers a backend that failed the call
once to none — met the same refusal, and ended the call with it while the larger backend had
a retry to give.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import replace
from typing import TYPE_CHECKING

from .errors import GateError, RequestTooLargeError

if TYPE_CHECKING:
    from .routing import Router, RouteRequest

__all__ = ["fitting", "move_elsewhere", "refused_for_length"]


def refused_for_length(error: GateError) -> bool:
    """The server refused the request as too long for it (not gptgate's own check)."""
    return isinstance(error, RequestTooLargeError) and error.status is not None


def move_elsewhere(
    error: GateError, router: Router, route: RouteRequest, tried: Set[str],
    too_long_for: set[str],
) -> bool:
    """Make ``error`` a retry on another backend when one the call has not ``tried`` may take
    it; returns whether it did. Its backend joins ``too_long_for`` either way."""
    if not refused_for_length(error) or error.backend is None:
        return False
    too_long_for.add(error.backend)
    if not router.has_alternative(route, frozenset(tried) | {error.backend}):
        return False
    error.retryable = error.moved = True
    return True


def fitting(route: RouteRequest, too_long_for: Set[str]) -> RouteRequest:
    """``route`` without the backends whose window refused the call's prompt (the router
    drops them while another fits: ``RouteRequest.refused``)."""
    if not too_long_for:
        return route
    return replace(route, refused=route.refused | frozenset(too_long_for))
