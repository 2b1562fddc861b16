"""A stream that a ``@gate.guard``-ed function returns from an SDK on its OWN HTTP client is
whole at its last event, whatever the API: the guard's permit is handed back, not held as for
a request the server still runs (gptgate/guard_stream.py). Only chat's ``data: [DONE]`` was
known: a Responses API stream (no ``[DONE]``; ``response.completed`` ends it) that its caller
stopped reading at that event held its slot for ``abandon_grace_s``, and so did an Anthropic
stream left at ``message_stop``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import anyio
import httpx2
import openai
import pytest

import gptgate as gg

BASE_URL = "http://127.0.0.1:9/v1"
SSE = {"content-type": "text/event-stream; charset=utf-8"}


def _event(kind: str, **fields: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


def _response(status: str) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 1.0, "status": status,
            "model": "m", "output": [], "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [], "usage": None}


#: every terminal event of a Responses stream, then the server holds the connection open
ENDS = {
    "response.completed": _event("response.completed", sequence_number=2,
                                 response=_response("completed")),
    "response.incomplete": _event("response.incomplete", sequence_number=2,
                                  response=_response("incomplete")),
}


@pytest.mark.parametrize("end", ENDS)
async def test_a_responses_stream_left_at_its_last_event_gives_its_permit_back(end: str) -> None:
    def serve(request: httpx2.Request) -> httpx2.Response:
        async def held_open() -> AsyncIterator[bytes]:
            yield _event("response.created", sequence_number=0,
                         response=_response("in_progress"))
            yield _event("response.output_text.delta", sequence_number=1, item_id="m",
                         output_index=0, content_index=0, delta="Hi.", logprobs=[])
            yield ENDS[end]
            await anyio.sleep_forever()

        return httpx2.Response(200, content=held_open(), headers=SSE)

    backend = gg.Backend(name="b", base_url=BASE_URL, model="m", concurrency=1,
                         transport=httpx2.MockTransport(serve))
    own = httpx2.AsyncClient(transport=httpx2.MockTransport(serve))
    client = openai.AsyncOpenAI(api_key="x", base_url=BASE_URL, max_retries=0, http_client=own)
    async with gg.Gateway([backend]) as gate:

        @gate.guard()
        async def ask() -> Any:
            return await client.responses.create(model="m", input="hi", stream=True)

        stream = await ask()
        async for event in stream:
            if event.type == end:
                break
        await stream.close()
        stats = gate.stats()["b"]
        assert (stats.in_flight, stats.abandoned_holding) == (0, 0)
    await own.aclose()


class _Permit:
    start = 0.0

    def __init__(self) -> None:
        self.ended: list[str] = []

    def ignore(self) -> None:
        self.ended.append("ignore")

    def abandon(self) -> None:
        self.ended.append("abandon")


@pytest.mark.parametrize("marker", [b"event: message_stop", b"data: [DONE]",
                                    b"event: response.completed"])
def test_an_end_marker_split_across_two_chunks_is_found(marker: bytes) -> None:
    from gptgate.guard_stream import _PermitFollows
    from gptgate.routing import CircuitBreaker

    permit = _Permit()
    state = SimpleNamespace(name="b", breaker=CircuitBreaker())
    follows = _PermitFollows(
        permit, lambda _: None, lambda exc: gg.BackendError("x"),  # type: ignore[arg-type]
        clock=None, state=state, tap=None,  # type: ignore[arg-type]
    )
    cut = len(marker) // 2
    follows.arrived(b"event: message_delta\ndata: {}\n\n" + marker[:cut], drained=False)
    follows.arrived(marker[cut:] + b"\ndata: {}\n\n", drained=False)
    follows.left()
    assert permit.ended == ["ignore"]
    assert state.breaker.failures == 0
