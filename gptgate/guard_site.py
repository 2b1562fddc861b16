"""Where a guarded call site's requests really go.

A guard without ``backend=`` is routed like any call, but the SDK inside it is bound to one
backend by the client it was given (``gate.http_client("a")``) and sends every request there,
whatever the router chose. Routed to "b", the guard held one of b's permits while its request
ran on a permit of its own at "a": b's limit counted calls b never saw, and — before the tries
were told apart — a's failures opened b's circuit and a's answers were booked twice, once on
each backend (found by a Flask app whose guarded SDK's backend died: calls free to fail over
to "b" found its circuit open).

So a try whose requests all went to one other backend is that backend's (the wire counted its
tokens, cost and failures there), and the call site learns where it sends: its later tries are
routed to that backend, when the guard's own constraints (``private=``, ``tier=``) allow it,
so their permit is the one their requests run under — one call, one permit — and their waits,
circuit and limit are that backend's. An explicit ``backend=`` is never overridden by what
the router or the call site learnt — with one exception the user asked for: the SDK's client
carries a failover policy (``gate.http_client("a", fallback=["b"])``, gptgate/sdk_failover.py).
The guard pins the call *site* to a, the client says where its requests go when a cannot
serve; so a guard pinned to a whose body's requests went through such a client follows it
while a's circuit is open: its try is routed to the first fallback whose circuit allows it
(as the client sends), its permit that backend's. Before, the guard refused every call once
a's circuit opened — the request never reached b, the client's failover unused. The call site
learns the client's order from its first request through it; before that — a's circuit opened
by other traffic before the site's first call — it goes where every client the gateway made
for a would send (gptgate/sdk_clients_made.py: nowhere when they would not agree, and the
first call is refused as before).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from .errors import NoBackendError
from .routing import BackendState, RouteRequest

__all__ = ["CallSite", "served_elsewhere"]


class EligibleBackends(Protocol):
    def eligible(
        self, request: RouteRequest, exclude: frozenset[str] = ...
    ) -> list[BackendState]: ...


def served_elsewhere(wire_attempts: int, elsewhere: Sequence[str]) -> str | None:
    """The backend that did a try's work when none of its requests went to the guard's own
    backend (the last one, if several did)."""
    if wire_attempts or not elsewhere:
        return None
    return elsewhere[-1]


class CallSite:
    """One guarded function's learnt backend (see the module docstring)."""

    __slots__ = ("backend", "failover")

    def __init__(self) -> None:
        #: the backend this call site's requests went to lately, when not the routed one
        self.backend: str | None = None
        #: per primary: the failover order (primary first) of the ``fallback=`` client this
        #: call site's requests went through lately
        self.failover: dict[str, tuple[str, ...]] = {}

    def route(
        self, route: RouteRequest, allows: Callable[[str], bool],
        made: Callable[[str, Callable[[str], bool]], str | None] = lambda _, __: None,
    ) -> RouteRequest:
        """The route of the next try: the guard's own, pinned to the learnt backend; a guard
        pinned to a backend whose circuit is closed to it (``allows``: False) and whose
        client fails over, to the first fallback the client would send to — as learnt, else
        where every client ``made`` for it would send."""
        if route.backend is not None:
            if allows(route.backend):
                return route
            order = self.failover.get(route.backend)
            if order is None:
                to = made(route.backend, allows)
            else:
                to = next((name for name in order[1:] if allows(name)), None)
            return route if to is None else replace(route, backend=to)
        if self.backend is None:
            return route
        return replace(route, backend=self.backend)

    def fails_over(self, order: tuple[str, ...]) -> None:
        """A try's request went through a ``fallback=`` client of this order."""
        if order:
            self.failover[order[0]] = order

    def unborne(self, route: RouteRequest, went: str, order: tuple[str, ...]) -> bool:
        """A try failed at ``went``, routed there by the clients made for the guard's
        backend (not by an order learnt), its body's requests through no ``fallback=``
        client (``order``: ()): the guess was wrong — its body sends elsewhere (its own
        client), so the failure is none of ``went``'s, and the site guesses no more."""
        pinned = route.backend
        if order or pinned is None or went == pinned or pinned in self.failover:
            return False
        self.failover[pinned] = (pinned,)  # no fallback client behind it: the pin holds
        return True

    def learn(self, route: RouteRequest, served: str | None, router: EligibleBackends) -> None:
        """A try's requests went to ``served`` only: route there from now on, if the guard
        may go there at all."""
        if served is None or route.backend is not None or served == self.backend:
            return
        try:
            router.eligible(replace(route, backend=served))
        except NoBackendError:
            return  # private= or tier= rule it out: the guard keeps its own routing
        self.backend = served
