"""Anthropic's ``overloaded_error`` sent as a stream's ``error`` event before its first token
(the HTTP status 200, ``message_start`` first) is the overload its non-streamed answer says
with a 529: a refusal before any work — requeued after the overload's wait without spending
an attempt or the retry budget, nothing billed, a pause of the backend and no strike for its
circuit — on ``gate.stream`` and for an SDK on ``gate.http_client`` (with or without a guard
around it).

Before, it was a failed attempt: ``gate.stream`` with the retry budget spent raised it, the
prompt of ``message_start`` was booked as waste, and it counted towards the circuit; the
anthropic SDK raised it mid-stream (``APIStatusError`` under a 200, which it never retries).
A real 529 is the control: the same outcome, before and after. Loopback fake server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import anthropic
import anyio
import httpx2
import pytest

import gptgate as gg
from benchmarks._threadserver import QuietHandler, served

MODEL = "claude-sonnet-4-5"
USER = [{"role": "user", "content": "hi"}]
OVERLOAD = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _event(kind: str, data: dict[str, object]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


START = _event("message_start", {"type": "message_start", "message": {
    "id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "content": [],
    "stop_reason": None, "stop_sequence": None,
    "usage": {"input_tokens": 2000, "output_tokens": 1}}})
WHOLE = b"".join([
    START,
    _event("content_block_start", {"type": "content_block_start", "index": 0,
                                   "content_block": {"type": "text", "text": ""}}),
    _event("ping", {"type": "ping"}),
    _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                   "delta": {"type": "text_delta", "text": "Hello"}}),
    _event("content_block_stop", {"type": "content_block_stop", "index": 0}),
    _event("message_delta", {"type": "message_delta",
                             "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                             "usage": {"output_tokens": 2}}),
    _event("message_stop", {"type": "message_stop"}),
])
#: what Anthropic streams when it is overloaded before the answer began
OVERLOADED = START + _event("ping", {"type": "ping"}) + _event("error", OVERLOAD)


class Server:
    """Answers its first request overloaded (``how``: an ``error`` event under a 200, or a
    529), every later one whole."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.requests = 0
        self.lock = threading.Lock()


@contextmanager
def anthropic_server(how: str) -> Iterator[tuple[str, Server]]:
    server = Server(how)

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            with server.lock:
                server.requests += 1
                first = server.requests == 1
            status, kind, body = 200, "text/event-stream", WHOLE
            if first and server.how == "event":
                body = OVERLOADED
            elif first:
                status, kind, body = 529, "application/json", json.dumps(OVERLOAD).encode()
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with served(Handler) as url:
        yield url, server


@asynccontextmanager
async def _gateway(url: str) -> AsyncIterator[gg.Gateway]:
    backend = gg.Backend(name="claude", provider="anthropic", base_url=url, model=MODEL,
                         api_key="sk-ant-test",
                         price=gg.Price(input_per_mtok=3.0, output_per_mtok=15.0))
    # the retry budget spent from the start: only a refusal requeued outside it gets through
    async with gg.Gateway([backend], clock=gg.ScaledClock(50), max_attempts=2,
                          retry_budget_ratio=0.0, retry_budget_min_per_s=0.0,
                          breaker_threshold=1, breaker_cooldown_s=600.0,
                          max_breaker_wait_s=0.0) as gate:
        yield gate


async def _via_stream(gate: gg.Gateway) -> str:
    async with gate.stream(USER, max_tokens=50) as s:
        return "".join([text async for text in s])


async def _via_sdk(gate: gg.Gateway) -> str:
    client = anthropic.AsyncAnthropic(api_key="sk-ant-test", max_retries=0,
                                      base_url=str(gate.backend_state("claude").pool.client
                                                   .base_url).rstrip("/"),
                                      http_client=gate.http_client("claude"))
    text = []
    stream = await client.messages.create(model=MODEL, max_tokens=50, messages=USER,  # type: ignore[arg-type]
                                          stream=True)
    async for event in stream:
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            text.append(event.delta.text)
    return "".join(text)


async def _via_guarded_sdk(gate: gg.Gateway) -> str:
    """The SDK on ``gate.http_client`` inside a guard: the guard requeues the 529."""

    @gate.guard(backend="claude")
    async def ask() -> str:
        return await _via_sdk(gate)

    return await ask()


PATHS = {"gate.stream": _via_stream, "http_client": _via_sdk, "guard": _via_guarded_sdk}


@pytest.mark.parametrize("how", ["event", "status 529"])
@pytest.mark.parametrize("path", PATHS)
async def test_an_overload_before_the_first_token_is_a_529(path: str, how: str) -> None:
    with anthropic_server(how) as (url, server):
        async with _gateway(url) as gate:
            text = await PATHS[path](gate)
            stats = gate.stats()["claude"]
            ledger = gate.runner.ledger.entries["claude"]
            breaker = gate.backend_state("claude").breaker
    assert (text, server.requests) == ("Hello", 2)
    # one failure seen, as a 529's: no strike for the circuit (its threshold is 1)
    assert (stats.failures, stats.circuit, breaker.failures) == (1, "closed", 0)
    # nothing billed for the overload: the whole answer alone is in the ledger
    assert (ledger.attempts, ledger.wasted_tokens, ledger.calls_ok) == (1, 0, 1)
    assert (ledger.input_tokens, ledger.output_tokens) == (2000, 2)


async def test_a_stream_stalled_before_its_answer_is_cut_at_the_idle_bound() -> None:
    """The transport reads a Messages stream's head before handing it on; a server that goes
    quiet after ``message_start`` is cut there at the backend's ``idle_timeout``, as the
    body's watch cuts it later — a timeout of the backend's, not a hang."""

    class Stalled(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield START
            await anyio.Event().wait()

    backend = gg.Backend(name="claude", provider="anthropic", base_url="http://127.0.0.1:9",
                         model=MODEL, api_key="sk-ant-test", idle_timeout=0.05,
                         transport=httpx2.MockTransport(lambda _: httpx2.Response(
                             200, headers={"content-type": "text/event-stream"},
                             stream=Stalled())))
    async with gg.Gateway([backend], breaker_threshold=1) as gate:
        with pytest.raises(anthropic.APITimeoutError):
            await _via_sdk(gate)
        stats = gate.stats()["claude"]
    assert (stats.timeouts, stats.failures, stats.circuit) == (1, 1, "open")
