"""Where the SDK clients a gateway made for a backend send its requests when it cannot serve.

A guard pinned to backend ``a`` follows the failover of the ``gate.http_client("a",
fallback=[...])`` client its body sends through (gptgate/guard_site.py), but a call site knows
that client only from a request it has seen. When a's circuit opened before the site's first
request — other traffic opened it — its first call was refused though the fallback was
healthy. The gateway knows every client it made, though: when all of those made for ``a``
fail over in one order, that is the order a body on any of them follows, and the site may
follow it before it has seen a request. When they differ (one without ``fallback=``, two
orders), the site cannot tell which its body uses, and keeps its pin until it has seen one:
a guess routed to ``b`` around a body that sends to ``a`` would book a's failures on b.
"""

from __future__ import annotations

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

    def order(self, primary: str) -> tuple[str, ...]:
        """The order every client made for ``primary`` fails over in; () when none has a
        fallback, or they differ."""
        orders = self._orders.get(primary)
        if orders is None or len(orders) != 1:
            return ()
        (only,) = orders
        return only if len(only) > 1 else ()
