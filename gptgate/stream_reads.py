"""How a caller's thread reads a stream a sync guard returned: counted there, watched from the
gateway's loop (gptgate/sync_guard.py), which may refuse the next read once it gave the
stream's permit back (left unread past the idle bound)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2

from .errors import RequestTimeout

__all__ = ["PAST_DEADLINE", "LeftByCaller", "StreamReads"]

PAST_DEADLINE = "gptgate: the call deadline passed while reading the answer"


class LeftByCaller(Exception):
    """How a returned stream ended when its caller closed or dropped it before its end (an
    SDK's event stream before its terminal event, a generator or iterator before its last
    item): no verdict for the circuit (gptgate/stream_cut.py) — it counted as a success,
    which reset a run of the backend's failures."""


class StreamReads:
    """The caller's reads of one returned stream; ``refusal``: what its next read raises;
    ``over_http``: the stream is an HTTP response's body (an SDK reads it)."""

    __slots__ = ("count", "over_http", "refusal")

    def __init__(self) -> None:
        self.count = 0
        self.refusal: Exception | None = None
        self.over_http = False

    def cut_at_deadline(self) -> None:
        """The guarded call's deadline passed: the next read raises. An SDK's body raises
        the transport's read timeout, which the SDK maps to its own timeout error (openai's
        ``APITimeoutError``); a generator or iterator of the application's own raises
        gptgate's ``RequestTimeout(deadline=True)``, as the guarded function cut there does."""
        if self.refusal is None:
            self.refusal = (
                httpx2.ReadTimeout(PAST_DEADLINE) if self.over_http
                else RequestTimeout(PAST_DEADLINE, deadline=True)
            )

    def next_of(self, inner: Iterator[Any]) -> Any:
        """``next(inner)``, counted, unless the loop refused it."""
        if self.refusal is not None:
            raise self.refusal
        piece = next(inner)
        self.count += 1
        return piece

    def pieces(self, inner: Iterator[Any]) -> Iterator[Any]:
        """``inner``'s pieces, counted, until the loop refuses the next; closes ``inner``."""
        try:
            while True:
                try:
                    piece = self.next_of(inner)
                except StopIteration:
                    return
                yield piece
        finally:
            close = getattr(inner, "close", None)
            if close is not None:
                close()
