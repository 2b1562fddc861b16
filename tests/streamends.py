"""A chat completion stream that ends the way a test asks: whole, reset by the peer,
truncated (a clean EOF with neither a finish reason nor ``[DONE]``) or stalled — for the
stream-cut rule's tests (gptgate/stream_cut.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import httpx2

URL = "http://127.0.0.1:9/v1"
USER = [{"role": "user", "content": "hi"}]
SSE = {"content-type": "text/event-stream"}


def chunk(text: str, finish: str | None = None) -> bytes:
    """One ``chat.completion.chunk`` event."""
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class EndingBody(httpx2.AsyncByteStream):
    """A chat stream: ``tokens`` content chunks, then how the server ends it (``end``)."""

    def __init__(self, end: str, tokens: int = 2) -> None:
        self.end = end
        self.tokens = tokens

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(self.tokens):
            yield chunk(f"t{i} ")
        if self.end == "reset":
            raise httpx2.RemoteProtocolError("peer closed connection without sending complete "
                                             "message body (incomplete chunked read)")
        if self.end == "stall":  # nothing more, ever: the idle timeout cuts it
            await anyio.Event().wait()
        if self.end == "whole":
            yield chunk("", "stop") + b"data: [DONE]\n\n"
        # "truncated": a clean EOF, with neither a finish_reason nor [DONE]
