"""An error response's body, read for its classification on the SDK and guard paths.

``gate.chat`` classifies a refusal by its body (``dialect.error_for_status``): OpenAI's 429
``insufficient_quota`` is an empty account, not a rate limit; Anthropic's 400 "credit balance
is too low" too; Azure's 400 ``content_filter`` billed its prompt; a 429 "Request too large …
Limit 30000, Requested 50000" can never fit. The SDK path read only the status (the body is
the SDK's to read), so each of those was mishandled there: an empty account paused, requeued
and retried as a busy one, never opening its circuit.

:func:`read_error_body` reads the first :data:`MAX_ERROR_BYTES` of an error response — errors
only: a success's body is never buffered here — and puts them back in front of the rest, so
the SDK reads every byte the server sent, in order, as if nobody had looked. A read that
fails (a reset, a timeout) is handed on too: the SDK meets it where it would have.
:func:`body_of` is the same bytes as an SDK's status exception carries them (the guard).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any

import anyio
import httpx2

__all__ = ["MAX_ERROR_BYTES", "body_of", "read_error_body"]

#: an error's JSON is a few hundred bytes; an HTML page's title is near its top
MAX_ERROR_BYTES = 64 * 1024


class _Replay(httpx2.AsyncByteStream):
    """The bytes read ahead, then the rest of the original stream (or the error its read
    met); closing it closes the original (its connection goes back to the pool)."""

    def __init__(
        self, head: bytes, rest: AsyncIterator[bytes] | None, original: httpx2.AsyncByteStream,
        failed: BaseException | None,
    ) -> None:
        self._head = head
        self._rest = rest
        self._original = original
        self._failed = failed

    async def __aiter__(self) -> AsyncIterator[bytes]:
        head, self._head = self._head, b""
        if head:
            yield head
        if self._failed is not None:
            raise self._failed
        if self._rest is not None:
            async for chunk in self._rest:
                yield chunk

    async def aclose(self) -> None:
        await self._original.aclose()


async def read_error_body(response: httpx2.Response, wait_s: float) -> bytes:
    """The first :data:`MAX_ERROR_BYTES` of ``response``'s body, read within ``wait_s`` real
    seconds (what arrived by then); the response's stream replays them to its reader."""
    if response.is_stream_consumed or not isinstance(response.stream, httpx2.AsyncByteStream):
        with suppress(httpx2.ResponseNotRead):
            return response.content[:MAX_ERROR_BYTES]
        return b""
    original = response.stream
    chunks = original.__aiter__()
    head: list[bytes] = []
    size = 0
    failed: BaseException | None = None
    ended = False
    try:
        with anyio.fail_after(wait_s):
            while size < MAX_ERROR_BYTES:
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    ended = True
                    break
                head.append(chunk)
                size += len(chunk)
    except TimeoutError:
        failed = httpx2.ReadTimeout(
            "gptgate: the error response's body did not arrive in time",
            request=response.request,
        )
    except httpx2.HTTPError as exc:  # the SDK meets it where it would have
        failed = exc
    body = b"".join(head)
    response.stream = _Replay(body, None if ended else chunks, original, failed)
    return body[:MAX_ERROR_BYTES]


def body_of(exc: BaseException) -> bytes | None:
    """The error body an SDK's or httpx's status exception carries when it was read
    (openai's and anthropic's ``APIStatusError.response``, else the JSON they parsed into
    ``.body``; ``HTTPStatusError.response`` after ``aread``), its first
    :data:`MAX_ERROR_BYTES`; None without one."""
    response = getattr(exc, "response", None)
    content: object = None
    with suppress(Exception):  # not read (httpx: ResponseNotRead), or no response at all
        content = response.content if response is not None else None
    if isinstance(content, (bytes, bytearray)) and content:
        return bytes(content[:MAX_ERROR_BYTES])
    body: Any = getattr(exc, "body", None)  # openai's / anthropic's: the JSON it parsed
    if isinstance(body, (dict, list)):
        with suppress(TypeError, ValueError):
            return json.dumps(body).encode()[:MAX_ERROR_BYTES]
    return None


#: the response extension that carries the transport's classification of an error response
#: (its body read): the requeue reads it rather than classifying the status again
CLASSIFIED = "gptgate_error"

#: statuses an SDK (openai's, anthropic's) retries unless ``x-should-retry`` says otherwise
_SDK_RETRIES = frozenset({408, 409, 429})


def hold_sdk_retry(response: httpx2.Response, retryable: bool) -> None:
    """An error the body says no retry can help (an empty account's 429, a request larger
    than the whole budget) gets ``x-should-retry: false`` — which the SDKs honour before
    their own status rule — unless the server said otherwise itself. The body is untouched."""
    status = response.status_code
    if retryable or "x-should-retry" in response.headers:
        return
    if status in _SDK_RETRIES or status >= 500:
        response.headers["x-should-retry"] = "false"
