"""How a caller's thread reads a stream a sync guard returned: counted there, watched from the
gateway's loop (gptgate/sync_guard.py), which may refuse the next read once it gave the
stream's permit back (left unread past the idle bound)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["StreamReads"]


class StreamReads:
    """The caller's reads of one returned stream; ``refusal``: what its next read raises."""

    __slots__ = ("count", "refusal")

    def __init__(self) -> None:
        self.count = 0
        self.refusal: Exception | None = None

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
