"""``SyncGateway.close()`` called from inside one of its own guarded calls.

A sync guard's function runs in its caller's thread while the gateway's loop holds its
permit; closing waits for every call in flight, that one included, which waits for the
function — the close — to return. Nothing ended it, the shutdown grace neither: a SIGTERM
handler that closed the gateway hung the process (Python runs signal handlers in the main
thread, inside whatever guarded function it was running). The close is refused with a
``GateError`` there, as a blocking verb on the gateway's own loop is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import GateError
from .sync_http import GUARDED_HERE

if TYPE_CHECKING:
    from .gateway import Gateway

__all__ = ["refuse_close_inside_guard"]

INSIDE_GUARD = (
    "SyncGateway.close() inside a guarded call of the same gateway would wait for that call, "
    "which waits for the close: close it once the call has returned (from a signal handler: "
    "set a flag there and close after the guarded function returns)"
)


def refuse_close_inside_guard(gateway: Gateway) -> None:
    """``GateError`` when this thread runs a guarded call holding a permit of ``gateway``."""
    held = GUARDED_HERE.get()
    if held is None:
        return
    for backend in gateway.config.backends:
        try:
            limiter = gateway.backend_state(backend.name).limiter
        except GateError:  # not open: no permit of it is held
            return
        if limiter is held.limiter:
            raise GateError(INSIDE_GUARD)
