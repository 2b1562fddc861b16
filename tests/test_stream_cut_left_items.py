"""Two paths the one rule for a stream that ends early (gptgate/stream_cut.py) missed.

* A ``SyncGateway`` guard around a *sync* SDK on its own HTTP client: a stream the SDK read
  to a clean EOF without ``[DONE]`` (the SDK raises nothing) counted as a success — a reset
  already counted as the backend's failure; the async guard counted both.
* The same guard's stream its caller closed before its end (a ``break``) counted as a
  success too, resetting a run of the server's cuts; a caller's leave says nothing of the
  backend, as on the async guard.
* A Responses API stream cut before ``response.completed``: its ``response.created`` event
  carries ``"status": "in_progress"``, which was read as the answer's finish reason, so the
  cut stream looked finished and counted as a success on every path that judges an SDK's
  stream (``gate.http_client``, the guards).

Real ``openai`` package, loopback mock transports.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator

import httpx2
import openai
import pytest

import gptgate as gg

URL = "http://127.0.0.1:9/v1"
USER = [{"role": "user", "content": "hi"}]
SSE = {"content-type": "text/event-stream"}
THRESHOLD = 3


def _chat_events(whole: bool) -> list[bytes]:
    def chunk(text: str, finish: str | None = None) -> bytes:
        body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
        return f"data: {json.dumps(body)}\n\n".encode()

    events = [chunk("t0 "), chunk("t1 ")]
    return [*events, chunk("", "stop"), b"data: [DONE]\n\n"] if whole else events


def _response(status: str) -> dict[str, object]:
    return {"id": "resp_1", "object": "response", "created_at": 1, "model": "m",
            "status": status, "output": [], "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": []}


def _responses_events(whole: bool) -> list[bytes]:
    def event(kind: str, **fields: object) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()

    events = [
        event("response.created", response=_response("in_progress"), sequence_number=0),
        event("response.in_progress", response=_response("in_progress"), sequence_number=1),
        event("response.output_text.delta", item_id="m1", output_index=0, content_index=0,
              delta="Hel", sequence_number=2, logprobs=[]),
    ]
    if whole:
        events.append(event("response.completed", response=_response("completed"),
                            sequence_number=3))
    return events


class _AsyncBody(httpx2.AsyncByteStream):
    def __init__(self, events: list[bytes]) -> None:
        self.events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self.events:
            yield event


class _SyncBody(httpx2.SyncByteStream):
    def __init__(self, events: list[bytes]) -> None:
        self.events = events

    def __iter__(self) -> Iterator[bytes]:
        yield from self.events


def _events(api: str, whole: bool) -> list[bytes]:
    return _chat_events(whole) if api == "chat" else _responses_events(whole)


def _backend(api: str, whole: bool) -> gg.Backend:
    return gg.Backend(
        name="llm", base_url=URL, model="m", api_key="sk-test", idle_timeout=5.0,
        transport=httpx2.MockTransport(lambda _: httpx2.Response(
            200, headers=SSE, stream=_AsyncBody(_events(api, whole)))),
    )


OPTIONS = {"breaker_threshold": THRESHOLD, "breaker_cooldown_s": 600.0,
           "max_breaker_wait_s": 0.0, "max_attempts": 1}


def _sync_ask(client: openai.OpenAI, api: str) -> object:
    if api == "chat":
        return client.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[call-overload]
    return client.responses.create(model="m", input="hi", stream=True)


async def _async_ask(client: openai.AsyncOpenAI, api: str) -> object:
    if api == "chat":
        return await client.chat.completions.create(  # type: ignore[call-overload]
            model="m", messages=USER, stream=True)
    return await client.responses.create(model="m", input="hi", stream=True)


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("whole", [False, True])
def test_a_sync_guards_sdk_stream_without_its_terminal_event_is_a_failure(
    api: str, whole: bool
) -> None:
    own = httpx2.Client(transport=httpx2.MockTransport(lambda _: httpx2.Response(
        200, headers=SSE, stream=_SyncBody(_events(api, whole)))))
    client = openai.OpenAI(base_url=URL, api_key="sk-test", max_retries=0, http_client=own)
    with gg.SyncGateway([_backend(api, True)], **OPTIONS) as gate:  # type: ignore[arg-type]

        @gate.guard(backend="llm")
        def ask() -> object:
            return _sync_ask(client, api)

        for _ in range(THRESHOLD):
            with ask() as stream:  # type: ignore[attr-defined]
                for _ in stream:
                    pass
        stats = gate.stats()["llm"]
    expected = (0, "closed") if whole else (THRESHOLD, "open")
    assert (stats.failures, stats.circuit) == expected


@pytest.mark.parametrize("path", ["http_client", "guard"])
@pytest.mark.parametrize("whole", [False, True])
async def test_a_responses_stream_cut_before_response_completed_is_a_failure(
    path: str, whole: bool
) -> None:
    backend = _backend("responses", whole)
    gate = gg.Gateway([backend], **OPTIONS)  # type: ignore[arg-type]
    async with gate:
        if path == "http_client":
            client = openai.AsyncOpenAI(base_url=URL, api_key="sk-test", max_retries=0,
                                        http_client=gate.http_client("llm"))
        else:
            own = httpx2.AsyncClient(transport=backend.transport)
            client = openai.AsyncOpenAI(base_url=URL, api_key="sk-test", max_retries=0,
                                        http_client=own)

        @gate.guard(backend="llm")
        async def guarded() -> object:
            return await _async_ask(client, "responses")

        for _ in range(THRESHOLD):
            stream = await (_async_ask(client, "responses") if path == "http_client"
                            else guarded())
            with contextlib.suppress(openai.APIError):
                async with stream:  # type: ignore[attr-defined]
                    async for _ in stream:  # type: ignore[attr-defined]
                        pass
        stats = gate.stats()["llm"]
    expected = (0, "closed") if whole else (THRESHOLD, "open")
    assert (stats.failures, stats.circuit) == expected


class _SyncCut(httpx2.SyncByteStream):
    """A sync chat stream: whole, or reset after its first events."""

    def __init__(self, end: str) -> None:
        self.end = end

    def __iter__(self) -> Iterator[bytes]:
        yield from _chat_events(self.end == "whole")
        if self.end == "reset":
            raise httpx2.RemoteProtocolError("peer closed connection")


class _Switch:
    """A sync server whose streams end as ``end`` says at each request."""

    def __init__(self) -> None:
        self.end = "reset"

    def __call__(self, _: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers=SSE, stream=_SyncCut(self.end))


def test_a_sync_guards_stream_its_caller_leaves_does_not_reset_a_run_of_cuts() -> None:
    """Cut, left, cut, left, cut on a ``SyncGateway`` guard around a sync SDK: three
    failures in a row for the circuit — a stream its caller left (a ``break`` and close)
    says nothing of the backend (gptgate/stream_cut.py), as on the async guard."""
    server = _Switch()
    client = openai.OpenAI(base_url=URL, api_key="sk-test", max_retries=0,
                           http_client=httpx2.Client(transport=httpx2.MockTransport(server)))
    with gg.SyncGateway([_backend("chat", True)], **OPTIONS) as gate:  # type: ignore[arg-type]

        @gate.guard(backend="llm")
        def ask() -> object:
            return _sync_ask(client, "chat")

        for i in range(2 * THRESHOLD - 1):
            server.end = "whole" if i % 2 else "reset"
            with contextlib.suppress(openai.APIError), ask() as stream:  # type: ignore[attr-defined]
                for _ in stream:
                    if i % 2:
                        break
        circuit = gate.stats()["llm"].circuit
    assert circuit == "open"
