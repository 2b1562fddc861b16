"""A guarded function awaited inside another guarded call: one call, one permit, one policy.

``answer`` guarded, awaiting ``summarize`` guarded on the same backend: each ``answer`` held a
permit and waited for a second one. With the limit's permits all held by ``answer`` calls (one
at ``concurrency=1``, N at N) every call waited out its deadline (the stall bound without one). So a
guard entered inside a running guarded try of the same gateway, on a backend its options
allow, is part of that try: its body runs under the outer permit (its SDK requests take the
outer's seat, gptgate/guard_seat.py), within the outer's deadline, and its failure is the
outer try's, retried by the outer's policy alone. A guard on another backend is a call of its
own there — its permit, span, retries — and what escapes it is *settled*: the outer neither
retries it (attempts would multiply: 3 × 3 tries) nor counts it as its own backend's failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .errors import GateError
from .routing import BackendState, RouteRequest

if TYPE_CHECKING:
    from .guard import GuardedCall

__all__ = ["covers", "covers_options", "settle", "settled"]


class _States(Protocol):
    def backend_state(self, name: str) -> BackendState: ...


def covers(gate: _States, route: RouteRequest, outer: GuardedCall | None) -> bool:
    """``outer`` (the guarded try running here, if any) holds a permit of ``gate`` on a
    backend ``route`` allows (its ``backend``, ``private`` and ``tier``)."""
    return covers_options(gate, outer, route.backend, route.private, route.tier)


def covers_options(
    gate: _States, outer: GuardedCall | None, backend: str | None, private: bool, tier: str
) -> bool:
    """:func:`covers` for a guard's options as given (``SyncGateway.guard``'s)."""
    if outer is None or not outer.running:
        return False  # a task the try spawned, still running after it ended: on its own
    name = outer.limiter.name
    try:
        state = gate.backend_state(name)
    except GateError:
        return False  # another gateway's backend
    if state.limiter is not outer.limiter:
        return False  # another gateway's call on a backend of the same name
    config = state.backend
    return (
        (backend is None or backend == name)
        and (not private or config.private)
        and (tier == "auto" or config.tier == tier)
    )


def settle(outer: GuardedCall | None, error: BaseException) -> None:
    """A nested guard on another backend ends in ``error``: counted and retried there."""
    if outer is not None:
        outer.settled.append(error)


def settled(call: GuardedCall, error: BaseException) -> bool:
    """``error`` escaped a guard nested in ``call``'s try on another backend."""
    return any(error is seen for seen in call.settled)
