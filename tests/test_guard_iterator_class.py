"""A stream a guarded function returns as an object of the application's own iterator class
is followed (the permit stays taken until it is read to its end or closed) and still IS an
object of that class: ``isinstance`` and ``functools.singledispatch`` recognise it.

Before, ``@gate.guard`` returned a proxy for an async iterator class that was neither an
``httpx2`` response, an SDK stream holding one, nor an async generator: ``isinstance(result,
Chunks)`` was False, and application code branching on its own type took the wrong branch.
``SyncGateway.guard`` did not follow such a sync iterator at all: its permit came back when
the function returned, with the stream unread.
"""

from __future__ import annotations

import collections.abc
import functools
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

import httpx2

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual
from tests.mockbackend import Script, backend, gateway, ok


class Chunks:
    """An application's async stream class: not a generator, no HTTP response."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.closed = False

    def __aiter__(self) -> Chunks:
        return self

    async def __anext__(self) -> str:
        if self.left == 0:
            raise StopAsyncIteration
        self.left -= 1
        return "chunk"

    async def aclose(self) -> None:
        self.closed = True

    def remaining(self) -> int:
        return self.left


@runtime_checkable
class HasRemaining(Protocol):
    def remaining(self) -> int: ...


@functools.singledispatch
def kind(value: object) -> str:
    return "other"


@kind.register
def _(value: Chunks) -> str:
    return "chunks"


def test_a_returned_async_iterator_class_is_still_its_class_and_holds_the_permit() -> None:
    async def main() -> None:
        clock = LoopClock()
        async with gateway(backend(Script(ok())), clock=clock) as gate:

            @gate.guard(backend="mock")
            async def stream() -> Chunks:
                return Chunks(3)

            chunks = await stream()
            assert isinstance(chunks, Chunks)  # False before: a proxy
            assert isinstance(chunks, collections.abc.AsyncIterator)
            assert isinstance(chunks, HasRemaining)
            assert kind(chunks) == "chunks"
            assert chunks.remaining() == 3 and not chunks.closed
            assert gate.stats()["mock"].in_flight == 1  # the permit follows the stream
            assert [c async for c in chunks] == ["chunk"] * 3
            assert chunks.remaining() == 0 and chunks.closed  # read to its end: closed
            assert gate.stats()["mock"].in_flight == 0

    run_virtual(main)


class Lines:
    """An application's sync stream class (a sync SDK's, say): ``__next__`` and ``close``."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.closed = False

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        if self.left == 0:
            raise StopIteration
        self.left -= 1
        return "line"

    def close(self) -> None:
        self.closed = True


def test_an_async_guard_returns_a_sync_iterator_as_it_is() -> None:
    """Nothing of a sync iterator runs on the wire of an async call: returned untouched."""

    async def main() -> None:
        async with gateway(backend(Script(ok())), clock=LoopClock()) as gate:
            lines = Lines(2)

            @gate.guard(backend="mock")
            async def stream() -> Lines:
                return lines

            assert await stream() is lines
            assert gate.stats()["mock"].in_flight == 0

    run_virtual(main)


def test_a_sync_guard_follows_a_returned_iterator_class_and_keeps_its_class() -> None:
    sick = httpx2.MockTransport(lambda request: httpx2.Response(200, json={}))
    config = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m", concurrency=2,
                        transport=sick)
    with gg.SyncGateway([config], clock=gg.ScaledClock(100), seed=3) as gate:

        @gate.guard(backend="b")
        def stream() -> Lines:
            return Lines(2)

        lines = stream()
        assert isinstance(lines, Lines)
        assert gate.stats()["b"].in_flight == 1  # before: 0, the stream unread
        assert list(lines) == ["line", "line"] and lines.closed
        assert gate.stats()["b"].in_flight == 0
        left = stream()
        left.close()  # closed unread: the permit comes back too
        assert left.closed and gate.stats()["b"].in_flight == 0
