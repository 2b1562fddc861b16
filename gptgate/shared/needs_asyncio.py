"""Redis is reached through redis-py's asyncio client: under trio, a clear error at the start.

gptgate runs under asyncio or trio (anyio), but ``shared=`` and a shared response cache talk
to Redis with ``redis.asyncio``, which needs a running asyncio loop. Opened under trio, the
gateway failed inside redis-py's connection pool with an untyped ``RuntimeError: no running
event loop``. :func:`require_asyncio` is called before any connection is made.
"""

from __future__ import annotations

import sniffio

from ..errors import GateError

__all__ = ["require_asyncio"]


def require_asyncio(what: str) -> None:
    """Refuse ``what`` (a feature that reaches Redis) under any event loop but asyncio's."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:  # pragma: no cover - always called on a loop
        return
    if library != "asyncio":
        raise GateError(
            f"{what} needs asyncio: it reaches Redis through redis-py's asyncio client, which "
            f"does not run under {library} (this event loop). Run the gateway under asyncio "
            f"(asyncio.run, or anyio.run(..., backend='asyncio')), or build it without {what}"
        )
