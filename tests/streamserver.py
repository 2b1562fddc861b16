"""A streaming OpenAI-compatible server as an ``httpx2.MockTransport`` handler that generates
at its own pace whether or not its client reads — into the socket's buffer, as a real one
does — and stops when the client hangs up. It counts the streams running at once and the
tokens it generated (what it bills). Non-streamed requests take ``answer_s``."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import anyio
import anyio.abc
import httpx2
import openai
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from tests.mockbackend import completion

BASE_URL = "http://127.0.0.1:9/v1"
USER = [{"role": "user", "content": "hi"}]


def sdk_on(gate: Any, **options: Any) -> openai.AsyncOpenAI:
    """The openai SDK on ``gate.http_client("b")``, without its own retries."""
    return openai.AsyncOpenAI(
        api_key="x", base_url=BASE_URL, max_retries=0, http_client=gate.http_client("b"),
        **options,
    )


async def raised_by(step: Awaitable[object]) -> BaseException | None:
    """What awaiting ``step`` raised (None: nothing)."""
    try:
        await step
    except BaseException as exc:
        return exc
    return None


def _event(data: dict[str, Any] | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def _chunk(content: str | None, finish: str | None = None) -> dict[str, Any]:
    delta = {"content": content} if content is not None else {}
    return {
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class _Body(httpx2.AsyncByteStream):
    def __init__(self, receive: MemoryObjectReceiveStream[bytes]) -> None:
        self._receive = receive

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._receive:
            yield chunk

    async def aclose(self) -> None:
        self._receive.close()  # the client hung up: the server's next write fails


class GeneratingServer:
    def __init__(
        self,
        task_group: anyio.abc.TaskGroup,
        *,
        tokens: int = 200,
        first_s: float = 0.2,
        per_token_s: float = 0.001,
        answer_s: float = 3.0,
    ) -> None:
        self.task_group = task_group
        self.tokens = tokens
        self.first_s = first_s
        self.per_token_s = per_token_s
        self.answer_s = answer_s
        self.running = 0
        self.peak = 0
        self.generated = 0
        self.requests = 0

    def _begin(self) -> None:
        self.requests += 1
        self.running += 1
        self.peak = max(self.peak, self.running)

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        if not json.loads(request.content).get("stream"):
            self._begin()
            try:
                await anyio.sleep(self.answer_s)
            finally:
                self.running -= 1
            self.generated += 2
            return httpx2.Response(200, json=completion("hi there"))
        send, receive = anyio.create_memory_object_stream[bytes](max_buffer_size=math.inf)
        self._begin()
        self.task_group.start_soon(self._generate, send)
        return httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_Body(receive)
        )

    async def _generate(self, send: MemoryObjectSendStream[bytes]) -> None:
        try:
            with send:
                await anyio.sleep(self.first_s)
                for i in range(self.tokens):
                    await send.send(_event(_chunk(f"w{i} ")))
                    self.generated += 1
                    await anyio.sleep(self.per_token_s)
                await send.send(_event(_chunk(None, "stop")) + _event("[DONE]"))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the client hung up: generation stops
        finally:
            self.running -= 1
