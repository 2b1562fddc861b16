"""ChatStreamReader: complete, truncated and failing streams, decided by the commit point."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import anyio
import httpx2
import pytest

from gptgate.errors import (
    BackendError,
    BadRequestError,
    RateLimitedError,
    RequestTimeout,
    StreamInterruptedError,
)
from gptgate.results import Usage
from gptgate.tokens import estimate_text_tokens
from gptgate.wire import ChatStreamReader


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> bytes:
    delta = {} if content is None else {"content": content}
    return sse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
    )


ROLE = sse(
    {
        "id": "chatcmpl-1",
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}],
    }
)
USAGE = sse(
    {
        "id": "chatcmpl-1",
        "choices": [],
        "usage": {
            "prompt_tokens": 30,
            "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 16},
        },
    }
)
DONE = b"data: [DONE]\n\n"


class Body:
    """A fake response body: yields chunks, then raises ``error`` (if any); records reads."""

    def __init__(self, chunks: Iterable[bytes], error: BaseException | None = None) -> None:
        self.chunks = list(chunks)
        self.error = error
        self.reads = 0
        self.closed = False

    async def _iterate(self) -> AsyncIterator[bytes]:
        try:
            for piece in self.chunks:
                self.reads += 1
                yield piece
            if self.error is not None:
                raise self.error
        finally:
            self.closed = True

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()


def reader_for(*chunks: bytes, error: BaseException | None = None) -> ChatStreamReader:
    return ChatStreamReader(Body(chunks, error), backend="b", request_id="req_1")


async def collect(reader: ChatStreamReader) -> list[str]:
    return [delta async for delta in reader]


async def test_complete_stream() -> None:
    reader = reader_for(ROLE, chunk("Hel"), chunk("lo"), chunk(None, "stop"), USAGE, DONE)
    assert await collect(reader) == ["Hel", "lo"]
    assert reader.done_seen is True
    result = reader.result()
    assert result.text == "Hello"
    assert result.finish_reason == "stop"
    assert result.usage == Usage(input_tokens=30, cached_input_tokens=16, output_tokens=4)
    assert result.response_id == "chatcmpl-1"


async def test_one_read_holding_everything() -> None:
    reader = reader_for(b"".join([ROLE, chunk("a"), chunk("b"), chunk(None, "stop"), DONE]))
    assert await collect(reader) == ["a", "b"]
    assert reader.result().text == "ab"


async def test_stream_split_at_every_byte() -> None:
    blob = b"".join([ROLE, chunk("Grüß "), chunk("👋"), chunk(None, "stop"), USAGE, DONE])
    reader = reader_for(*(blob[i : i + 1] for i in range(len(blob))))
    assert "".join(await collect(reader)) == "Grüß 👋"
    assert reader.result().usage is not None


async def test_missing_done_but_finish_reason_is_complete() -> None:
    reader = reader_for(ROLE, chunk("Hi"), chunk(None, "length"), USAGE)
    assert await collect(reader) == ["Hi"]
    assert reader.done_seen is False
    assert reader.result().finish_reason == "length"


async def test_nothing_is_read_past_done_except_the_drain() -> None:
    body = Body([chunk("x"), DONE + chunk("ignored"), chunk("also ignored")])
    reader = ChatStreamReader(body, backend="b")
    assert await collect(reader) == ["x"]
    assert reader.result().text == "x"
    assert body.closed  # drained to the end, so the connection can be reused


async def test_connection_cut_after_done_is_still_complete() -> None:
    # llama-cpp-python: [DONE], then the connection is closed mid-body
    cut = httpx2.RemoteProtocolError("peer closed connection")
    reader = reader_for(chunk("x"), chunk(None, "stop"), DONE, error=cut)
    assert await collect(reader) == ["x"]
    assert reader.result().text == "x"


async def test_truncated_after_content_is_interrupted_with_estimate() -> None:
    reader = reader_for(ROLE, chunk("The answer is "), chunk("forty"))
    received: list[str] = []
    with pytest.raises(StreamInterruptedError) as info:
        async for delta in reader:
            received.append(delta)
    error = info.value
    assert received == ["The answer is ", "forty"]
    assert error.partial_text == "The answer is forty"
    assert error.output_tokens == estimate_text_tokens("The answer is forty")
    assert error.usage_estimated is True
    assert error.billed is True
    assert (error.backend, error.request_id) == ("b", "req_1")
    with pytest.raises(RuntimeError):
        reader.result()


async def test_truncated_mid_event_is_interrupted() -> None:
    reader = reader_for(chunk("abc"), b'data: {"choices": [{"delta": {"cont')
    with pytest.raises(StreamInterruptedError, match="cut mid-event") as info:
        await collect(reader)
    assert info.value.partial_text == "abc"


async def test_interrupted_stream_reports_real_usage_when_it_came() -> None:
    reader = reader_for(chunk("abc"), USAGE)
    with pytest.raises(StreamInterruptedError) as info:
        await collect(reader)
    assert (info.value.output_tokens, info.value.usage_estimated) == (4, False)


async def test_empty_body_is_interrupted_without_text() -> None:
    with pytest.raises(StreamInterruptedError) as info:
        await collect(reader_for())
    assert info.value.partial_text == ""
    assert info.value.billed is False


async def test_error_event_before_content_is_the_mapped_error() -> None:
    error_event = (
        b'event: error\ndata: {"error": {"message": "Rate limit reached", '
        b'"type": "rate_limit_error"}}\n\n'
    )
    reader = reader_for(ROLE, error_event)
    with pytest.raises(RateLimitedError, match="Rate limit reached") as info:
        await collect(reader)
    assert info.value.request_id == "req_1"
    assert info.value.billed is True  # the role chunk shows the server started on it


async def test_error_event_after_content_is_interrupted_and_chained() -> None:
    error_event = b'event: error\ndata: {"message": "overloaded", "type": "server_error"}\n\n'
    reader = reader_for(chunk("partial"), error_event, chunk("never"))
    received: list[str] = []
    with pytest.raises(StreamInterruptedError, match="overloaded") as info:
        async for delta in reader:
            received.append(delta)
    assert received == ["partial"]
    assert info.value.partial_text == "partial"
    assert isinstance(info.value.__cause__, BackendError)


async def test_error_event_with_plain_text_data() -> None:
    with pytest.raises(BackendError, match="boom"):
        await collect(reader_for(b"event: error\ndata: boom\n\n"))


async def test_json_error_chunk_under_200() -> None:
    reader = reader_for(sse({"error": {"message": "context too long", "code": 400}}))
    with pytest.raises(BadRequestError, match="context too long"):
        await collect(reader)


async def test_deltas_in_the_same_read_are_yielded_before_the_error() -> None:
    reader = reader_for(chunk("a") + chunk("b") + b"data: {oops\n\n")
    received: list[str] = []
    with pytest.raises(StreamInterruptedError) as info:
        async for delta in reader:
            received.append(delta)
    assert received == ["a", "b"]
    assert info.value.partial_text == "ab"
    assert isinstance(info.value.__cause__, BackendError)


async def test_malformed_chunk_before_content_is_backend_error() -> None:
    with pytest.raises(BackendError, match="malformed") as info:
        await collect(reader_for(ROLE, b"data: {oops\n\n"))
    assert not isinstance(info.value, StreamInterruptedError)
    assert info.value.retryable is True


async def test_non_object_chunk_is_malformed() -> None:
    with pytest.raises(BackendError, match="malformed"):
        await collect(reader_for(b"data: [1, 2]\n\n"))


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx2.ReadError("reset"), BackendError),
        (httpx2.RemoteProtocolError("incomplete chunked read"), BackendError),
        (httpx2.ReadTimeout("idle"), RequestTimeout),
        (anyio.EndOfStream(), BackendError),
        (ConnectionResetError(104, "reset"), BackendError),
    ],
)
async def test_transport_error_before_content_is_retryable(
    exc: Exception, expected: type[Exception]
) -> None:
    reader = reader_for(ROLE, error=exc)
    with pytest.raises(expected) as info:
        await collect(reader)
    assert not isinstance(info.value, StreamInterruptedError)
    assert info.value.retryable is True  # type: ignore[attr-defined]
    assert info.value.__cause__ is exc
    assert reader.has_content is False


async def test_transport_error_after_content_is_interrupted() -> None:
    exc = httpx2.ReadError("connection reset")
    reader = reader_for(ROLE, chunk("Once upon"), error=exc)
    received: list[str] = []
    with pytest.raises(StreamInterruptedError) as info:
        async for delta in reader:
            received.append(delta)
    assert received == ["Once upon"]
    assert reader.has_content is True
    assert info.value.partial_text == "Once upon"
    assert info.value.output_tokens == estimate_text_tokens("Once upon")
    assert info.value.billed is True
    assert isinstance(info.value.__cause__, BackendError)
    assert info.value.__cause__.__cause__ is exc


async def test_transport_error_after_finish_reason_is_complete() -> None:
    reader = reader_for(chunk("done"), chunk(None, "stop"), error=httpx2.ReadError("reset"))
    assert await collect(reader) == ["done"]
    assert reader.result().text == "done"


async def test_invalid_utf8_is_replaced_not_a_crash() -> None:
    blob = chunk("ok\u00e9").replace(b"ok\\u00e9", b"ok\xff\xfe")
    reader = reader_for(blob, chunk(None, "stop"), DONE)
    assert await collect(reader) == ["ok\ufffd\ufffd"]


async def test_keep_alive_comments_and_empty_data_are_skipped() -> None:
    reader = reader_for(b": keep-alive\n\n", b"data:\n\n", chunk("x"), b": ping\n\n", DONE)
    assert await collect(reader) == ["x"]


async def test_done_without_trailing_blank_line() -> None:
    reader = reader_for(chunk("x"), b"data: [DONE]")
    assert await collect(reader) == ["x"]
    assert reader.done_seen is True


async def test_result_before_completion_raises() -> None:
    reader = reader_for(chunk("x"), DONE)
    with pytest.raises(RuntimeError):
        reader.result()


async def test_iteration_after_an_error_stops() -> None:
    reader = reader_for(chunk("x"))
    with pytest.raises(StreamInterruptedError):
        await collect(reader)
    assert await collect(reader) == []


async def test_aclose_closes_the_byte_iterator() -> None:
    body = Body([chunk("a"), chunk("b"), DONE])
    reader = ChatStreamReader(body, backend="b")
    async for _ in reader:
        break
    await reader.aclose()
    assert body.closed
    assert await collect(reader) == []
