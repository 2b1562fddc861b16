"""Which event loop a :class:`~gptgate.ResponseCache` serves: one at a time.

A cache's single-flight events are the running loop's (anyio/asyncio events refuse a waiter
from another loop: ``RuntimeError: ... is bound to a different event loop``), and its store is
written without a lock by that loop's thread. Two gateways on one loop may share a cache
(their keys differ where their backends do); a gateway opening it while gateways on another
loop — an async app's and a ``SyncGateway``'s — hold it open is refused, naming what works.
"""

from __future__ import annotations

import threading

from .errors import BadRequestError

__all__ = ["OTHER_LOOP", "LoopHolders"]

OTHER_LOOP = (
    "this ResponseCache is open in a gateway on another event loop (another thread): a cache "
    "serves one loop at a time. To share answers between an async app and its sync code, "
    "drive the app's gateway from the threads with gg.SyncGateway(gateway=app_gate) (one "
    "gateway, one cache, single-flight across both); or give each gateway its own "
    "ResponseCache(shared=...) on one Redis"
)


class LoopHolders:
    """The open gateways holding a cache, and the thread of the loop they run on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._thread: int | None = None

    def hold(self) -> None:
        here = threading.get_ident()
        with self._lock:
            if self._count and self._thread != here:
                raise BadRequestError(OTHER_LOOP)
            self._thread = here
            self._count += 1

    def release(self) -> bool:
        with self._lock:
            self._count = max(0, self._count - 1)
            if not self._count:
                self._thread = None
            return not self._count
