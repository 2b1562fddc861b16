"""gptgate/error_body.py reads the head of an error body and replays it: the reader gets the
same bytes in order, and a read that failed or stalled fails for it where it would have."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx2
import pytest

from gptgate.error_body import MAX_ERROR_BYTES, read_error_body


class _Stream(httpx2.AsyncByteStream):
    def __init__(self, chunks: list[bytes], then: str | None = None) -> None:
        self.chunks = chunks
        self.then = then
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.then == "reset":
            raise httpx2.ReadError("connection reset")
        if self.then == "stall":
            await anyio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


def _response(stream: _Stream) -> httpx2.Response:
    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    return httpx2.Response(429, stream=stream, request=request)


async def test_the_reader_gets_every_byte_of_a_body_longer_than_the_head() -> None:
    chunks = [b"a" * 40_000, b"b" * 40_000, b"c" * 40_000]
    stream = _Stream(chunks)
    response = _response(stream)
    head = await read_error_body(response, 5.0)
    assert head == (b"a" * 40_000 + b"b" * 40_000)[:MAX_ERROR_BYTES]
    assert await response.aread() == b"".join(chunks)
    await response.aclose()
    assert stream.closed  # its connection goes back to the pool


@pytest.mark.parametrize(("then", "raised"), [("reset", httpx2.ReadError),
                                               ("stall", httpx2.ReadTimeout)])
async def test_a_failed_read_fails_for_the_reader_after_the_bytes_that_came(
    then: str, raised: type[Exception]
) -> None:
    response = _response(_Stream([b'{"error": '], then))
    assert await read_error_body(response, 0.05) == b'{"error": '
    got = b""
    with pytest.raises(raised):
        async for chunk in response.aiter_raw():
            got += chunk
    assert got == b'{"error": '
