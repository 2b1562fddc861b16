"""Where the SDK clients a gateway made for a backend send its requests when it cannot serve.

A guard pinned to backend ``a`` follows the failover of the ``gate.http_client("a",
fallback=[...])`` client its body sends through (gptgate/guard_site.py), but a call site knows
that client only from a request it has seen. When a's circuit opened before the site's first
request — other traffic opened it — its first call was refused though the fallback was
healthy. The gateway knows every client it made, though: when all of those made for ``a``
would send a request to the same fallback now, a body on any of them does, and the site may
route there before it has seen a request. When they would not (one without ``fallback=``,
two orders whose first open fallbacks differ), the site cannot tell which its body uses, and
keeps its pin until it has seen one: a guess routed to ``b`` around a body that sends
elsewhere would book another backend's work on b.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ClientsMade"]


class ClientsMade:
    """The failover orders (primary first) of one gateway's SDK clients, per primary. Orders,
    not clients: a client made per request adds nothing, and nothing is held after it."""

    __slots__ = ("_orders",)

    def __init__(self) -> None:
        self._orders: dict[str, set[tuple[str, ...]]] = {}

    def made(self, primary: str, fallbacks: tuple[str, ...]) -> None:
        """A client for ``primary`` was made, failing over to ``fallbacks`` (none: ())."""
        self._orders.setdefault(primary, set()).add((primary, *fallbacks))

    def sends_to(self, primary: str, allows: Callable[[str], bool]) -> str | None:
        """The fallback every client made for ``primary`` would send a request to now (the
        first in its order whose circuit ``allows`` it); None when one has none, or they
        would not agree."""
        chosen = {
            next((name for name in order[1:] if allows(name)), None)
            for order in self._orders.get(primary, ())
        }
        if len(chosen) != 1:
            return None
        return chosen.pop()
