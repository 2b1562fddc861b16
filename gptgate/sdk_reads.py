"""A stored answer an SDK reads again on ``gate.http_client`` (gptgate/sdk_client.py).

The Responses API's background mode (``background=True``) answers its create with a
``queued`` response and no usage, and the SDK polls ``responses.retrieve`` until the answer is
done; an app reads a response again by its id; ``chat.completions.retrieve`` reads a stored
completion (``store=True``). A read of a finished answer carries its usage, and every read was
booked: three reads of one completed response billed it three times. :class:`BookedAnswers`
books a response's usage once per id — at its creation when that answered, else at the first
read that finds it done (only a read is checked against it: a server that gives every answer
the same id, as some local ones do, would otherwise lose real answers). Only an answer the
server keeps (:func:`stored`) is remembered at its creation: a plain chat completion can
never be read again, and remembering each one's id grew the process by 500 entries over 500
calls (tests/test_soak.py).

:func:`operation_name` names such a request by its endpoint, not by its last path segment:
``GET /responses/resp_68af…`` was the operation ``"resp_68af…"`` — the span's name and a
metric attribute, one metric series per response.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cachetools import LRUCache

__all__ = ["BookedAnswers", "operation_name", "stored"]

#: a path segment that names an endpoint: lowercase words (``input_items``), never an id
#: (``resp_68af…``, ``chatcmpl-B9M…``, ``file-abc123``, a model's ``gpt-4o``)
_WORD = re.compile(r"[a-z_]+")


def operation_name(path: str) -> str:
    """The endpoint a path names: its last segment that is a plain word ("request": none)."""
    for segment in reversed(path.split("/")):
        if _WORD.fullmatch(segment):
            return segment
    return "request"


def stored(path: str, body: Mapping[str, Any]) -> bool:
    """The server keeps this request's answer to be read again by its id: a Responses API
    create unless ``store=False`` (its default is to store), any other with ``store=True`` (a
    chat completion's default is not to)."""
    store = body.get("store")
    if path.rstrip("/").endswith("/responses"):
        return store is not False
    return store is True


class BookedAnswers:
    """The ids of the last answers whose usage was booked (a bounded LRU)."""

    __slots__ = ("_ids",)

    def __init__(self, size: int = 4096) -> None:
        self._ids: LRUCache[str, bool] = LRUCache(maxsize=size)

    def booked(self, response_id: str | None) -> None:
        """An answer's usage was booked (a create's)."""
        if response_id:
            self._ids[response_id] = True

    def first_read(self, response_id: str | None) -> bool:
        """A read of a stored answer: book its usage (True) unless it was booked before."""
        if not response_id:
            return True
        if response_id in self._ids:
            return False
        self._ids[response_id] = True
        return True
