"""Stored answers a fallback created, read back through the primary's client
(``gate.http_client("a", fallback=["b"])``, gptgate/sdk_failover.py).

A Responses API answer is stored by the server that made it (a chat completion too, with
``store=True``): ``responses.retrieve(id)``, its ``input_items``, its ``delete``, ``cancel``
and a follow-up naming it in ``previous_response_id`` only work there. One created on ``b``
while ``a`` was down was read from ``a`` — a connection error or a 401 — so the answer was
unreachable through the client that created it. The gateway now remembers, per gateway, which
backend created each of the last :data:`SIZE` stored answers it moved (the id read from the
answer's first bytes as the SDK reads them: a JSON answer's or a stream's first ``"id"``) and
sends such a request to that backend — its URL, its key — whatever state ``a`` is in, and
never elsewhere (the answer lives there only). An id it did not see (another process's, or
evicted) goes to the primary as before, which answers for it (a 404 when it is not there).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from weakref import WeakKeyDictionary

import httpx2
from cachetools import LRUCache

__all__ = ["SIZE", "PlacedAnswers", "placed_answers", "sniff_id"]

#: the stored answers remembered per gateway (an LRU: an id is ~60 bytes)
SIZE = 4096
#: a request on a stored answer: ``…/responses/{id}[/input_items|/cancel]``,
#: ``…/chat/completions/{id}[/messages]``
_ON_ANSWER = re.compile(r"/(responses|chat/completions)/([^/]+)(/[a-z_]+)?$")
#: an answer's first ``"id"`` (a JSON answer's own; a stream's first event's response)
_ID = re.compile(rb'"id"\s*:\s*"([^"\\]{1,256})"')
#: how far into an answer its id is looked for
_HEAD = 8192


class PlacedAnswers:
    """Which backend created each of the last :data:`SIZE` answers moved off a primary."""

    __slots__ = ("_where",)

    def __init__(self, size: int = SIZE) -> None:
        self._where: LRUCache[str, str] = LRUCache(maxsize=size)

    def __len__(self) -> int:
        return len(self._where)

    def placed(self, answer_id: str, backend: str) -> None:
        self._where[answer_id] = backend

    def of(self, path: str, body: Mapping[str, Any]) -> tuple[str, bytes] | None:
        """The backend holding the answer a request reads or continues, and the request's
        API tail there (``b"responses/resp_1"``); None: not one remembered."""
        match = _ON_ANSWER.search(path.rstrip("/"))
        if match is not None and match.group(2) in self._where:
            return self._where[match.group(2)], match.group(0).lstrip("/").encode()
        previous = body.get("previous_response_id")
        if isinstance(previous, str) and previous in self._where:
            return self._where[previous], b"responses"
        return None


_BY_GATE: WeakKeyDictionary[object, PlacedAnswers] = WeakKeyDictionary()


def placed_answers(gate: object) -> PlacedAnswers:
    """The gateway's record (SDK clients are often built per request: theirs is one)."""
    found = _BY_GATE.get(gate)
    if found is None:
        found = _BY_GATE[gate] = PlacedAnswers()
    return found


class _Sniffed(httpx2.AsyncByteStream):
    """The answer's bytes as they are read, its first ``"id"`` handed to ``found``."""

    def __init__(self, stream: httpx2.AsyncByteStream, found: Callable[[str], None]) -> None:
        self._stream, self._found = stream, found
        self._head: bytes | None = b""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            if self._head is not None:
                self._look(chunk)
            yield chunk

    def _look(self, chunk: bytes) -> None:
        assert self._head is not None
        self._head += chunk[: _HEAD - len(self._head)]
        match = _ID.search(self._head)
        if match is not None:
            self._found(match.group(1).decode(errors="replace"))
        if match is not None or len(self._head) >= _HEAD:
            self._head = None  # found, or not in the answer's head: no more looking

    async def aclose(self) -> None:
        await self._stream.aclose()


def sniff_id(response: httpx2.Response, found: Callable[[str], None]) -> None:
    """Hand ``found`` the answer's id as the SDK reads it (at once, a body read already)."""
    try:
        content = response.content
    except httpx2.ResponseNotRead:
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _Sniffed(response.stream, found)
        return
    match = _ID.search(content[:_HEAD])
    if match is not None:
        found(match.group(1).decode(errors="replace"))
