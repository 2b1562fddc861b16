"""Anthropic's overload sent inside a stream before its first token, read as the 529 it is.

Overloaded, Anthropic answers a non-streamed request with a 529 ``overloaded_error``; a
streamed one may get its 200 and ``message_start`` first, then an ``error`` event carrying the
same ``overloaded_error`` — "would normally correspond to an HTTP 529 in a non-streaming
context", in Anthropic's streaming docs. No token was generated, so nothing is billed. The
anthropic SDK raises it from the stream as an ``APIStatusError`` under a 200, which it never
retries (its retries are of requests, not of streams it has begun handing out).

gptgate read it as a failed attempt: on ``gate.stream`` it spent an attempt and the retry
budget, booked ``message_start``'s prompt as waste and counted towards the circuit; on
``gate.http_client`` the SDK's caller got the error. It is now the 529's refusal: on
``gate.stream`` the error a 529 raises (:func:`overload_error`: status 529, the overload's
wait as ``retry-after``, unbilled — requeued outside ``max_attempts`` and the retry budget,
gptgate/shed.py); on ``gate.http_client`` the transport looks at a Messages stream's first
events (:func:`overload_as_529`) and, overloaded, hands the SDK the 529 response itself —
requeued by the transport (gptgate/sdk_requeue.py), by a guard around it, or retried by the
SDK as a 529. Once the answer has begun, an overload is a stream cut like any other.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2

from gptgate.errors import BackendError
from gptgate.wire.sse import SSEDecoder

__all__ = [
    "OVERLOAD_WAIT_S", "is_overload", "overload_as_529", "overload_error", "overload_message",
]

#: the wait given to Anthropic's overload (529 ``overloaded_error``), which comes without
#: ``retry-after``: the SDK's and Claude Code's first retry waits about this long
OVERLOAD_WAIT_S = 1.0
#: the error type Anthropic's overload carries
_OVERLOADED = "overloaded_error"
#: events a stream sends before its answer begins: an overload among them is a refusal
_BEFORE_ANSWER = frozenset({"message_start", "ping"})
#: the most of a stream's head looked at (its first events are a few hundred bytes)
_HEAD_BYTES = 64 * 1024


def is_overload(payload: Any) -> bool:
    """An error event's payload (``{"type": "error", "error": {...}}`` or the inner object)
    naming Anthropic's overload."""
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        payload = payload["error"]
    return isinstance(payload, dict) and payload.get("type") == _OVERLOADED


def overload_message(payload: Any) -> str:
    """What the overload's error object says (``"Overloaded"``)."""
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        payload = payload["error"]
    message = payload.get("message") if isinstance(payload, dict) else None
    return message if isinstance(message, str) and message else "Overloaded"


def overload_error(
    message: str, *, backend: str | None, request_id: str | None = None
) -> BackendError:
    """The error a 529 ``overloaded_error`` raises (``AnthropicDialect.error_for_status``):
    retryable, its wait as ``retry_after``, nothing billed."""
    return BackendError(
        f"backend overloaded: [{_OVERLOADED}] {message} (before the stream's first token, "
        f"as its 529)",
        backend=backend, status=529, request_id=request_id, retry_after=OVERLOAD_WAIT_S,
    )


async def overload_as_529(
    response: httpx2.Response, request: httpx2.Request, idle_s: float | None = None
) -> httpx2.Response:
    """``response`` to ``request`` (a 200 event stream of the Messages API, before the
    client took it: a transport's), its body as it was; or, when
    its first events are an overload before the answer began, a 529 response carrying that
    error (the stream closed). Only the stream's head is read here — up to its first event
    of the answer — and handed on in front of the rest."""
    stream = response.stream
    if (
        response.status_code >= 300
        or not response.headers.get("content-type", "").startswith("text/event-stream")
        or not request.url.path.rstrip("/").endswith("/v1/messages")
        or response.headers.get("content-encoding", "identity") != "identity"
        or not isinstance(stream, httpx2.AsyncByteStream)
    ):
        return response
    pieces = stream.__aiter__()
    decoder = SSEDecoder()
    head: list[bytes] = []
    size = 0
    overload: dict[str, Any] | None = None
    looking = True
    while looking and size < _HEAD_BYTES:
        try:
            with anyio.fail_after(idle_s):
                piece = await pieces.__anext__()
        except StopAsyncIteration:
            break
        except TimeoutError:
            raise httpx2.ReadTimeout("stream idle between chunks") from None
        head.append(piece)
        size += len(piece)
        for event in decoder.feed(piece):
            if event.event == "error" or event.event not in _BEFORE_ANSWER:
                looking = False
                payload = _loads(event.data)
                if event.event == "error" and is_overload(payload):
                    overload = payload
                break
    if overload is None:
        response.stream = _Replayed(head, pieces, stream)
        return response
    await _close(pieces, stream)
    headers = [(k, v) for k, v in response.headers.multi_items()
               if k.lower() not in ("content-type", "content-length", "transfer-encoding")]
    refusal = httpx2.Response(
        529, headers=[*headers, ("content-type", "application/json")],
        content=json.dumps(overload).encode(), request=request,
        extensions=response.extensions,
    )
    return refusal


def _loads(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


class _Replayed(httpx2.AsyncByteStream):
    """A body whose head was read already: the head, then the rest, closed as the
    original."""

    def __init__(
        self, head: list[bytes], rest: AsyncIterator[bytes], original: httpx2.AsyncByteStream
    ) -> None:
        self._head = head
        self._rest = rest
        self._original = original

    async def __aiter__(self) -> AsyncIterator[bytes]:
        head, self._head = self._head, []
        for piece in head:
            yield piece
        async for piece in self._rest:
            yield piece

    async def aclose(self) -> None:
        await _close(self._rest, self._original)


async def _close(pieces: AsyncIterator[bytes], stream: httpx2.AsyncByteStream) -> None:
    """Close the reader of a body's pieces (an async generator, half read), then the body."""
    try:
        close = getattr(pieces, "aclose", None)
        if close is not None:
            await close()
    finally:
        await stream.aclose()
