"""One attempt, cancelled at each of its stages, hands back everything it took.

An attempt is admitted (permit), paced, sent (span, response) and read; the caller may go at
any of those points. Whatever the stage: nothing is left in flight or queued at the limiter,
no connection checked out of the pool, no attempt span open, no response body unclosed, and
the ledger counts the attempt as possibly billed exactly when its request had been sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import httpx2
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from tests.mockbackend import Script, backend, error, gateway, sse, wait_until

USER = [{"role": "user", "content": "hello"}]


class _FirstChunkThenSilence(httpx2.AsyncByteStream):
    """An SSE body that sends its first delta and then nothing: the call is mid-stream."""

    def __init__(self, never: anyio.Event) -> None:
        self.never = never
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield sse(["first "], finish=False, done=False)
        await self.never.wait()

    async def aclose(self) -> None:
        self.closed = True


class _Stuck:
    """The backend's side: what it answers, and the bodies it handed out (to see them closed)."""

    def __init__(self) -> None:
        self.never = anyio.Event()
        self.bodies: list[_FirstChunkThenSilence] = []

    async def hang(self, request: httpx2.Request) -> httpx2.Response:
        await self.never.wait()
        raise AssertionError("unreachable")

    async def stream(self, request: httpx2.Request) -> httpx2.Response:
        body = _FirstChunkThenSilence(self.never)
        self.bodies.append(body)
        return httpx2.Response(200, stream=body, headers={"content-type": "text/event-stream"})


async def _read_one_delta(gate: gg.Gateway, scope: anyio.CancelScope | None) -> None:
    """Read the first delta of a visible stream, then cancel (``scope``) or leave the stream."""
    async with gate.stream(USER, max_tokens=50) as s:
        async for _ in s:
            if scope is not None:
                scope.cancel()
                await anyio.sleep(1)  # the cancellation lands here, mid-stream
            break  # the caller leaves: the attempt's generator is closed


Stage = Callable[[gg.Gateway, Script, anyio.CancelScope], Awaitable[None]]


async def _queued(gate: gg.Gateway, script: Script, scope: anyio.CancelScope) -> None:
    """One call holds the only permit (sent, no answer); the other waits in the queue."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: gate.chat(USER))
        tg.start_soon(lambda: gate.chat(USER))
        await wait_until(lambda: gate.stats()["mock"].queued == 1)
        scope.cancel()


async def _paced(gate: gg.Gateway, script: Script, scope: anyio.CancelScope) -> None:
    """A 429 with retry-after paused the backend: the next call holds its permit and waits
    at the pacer, before anything is sent."""
    with pytest.raises(gg.RateLimitedError):
        await gate.chat(USER, max_attempts=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: gate.chat(USER))
        await wait_until(lambda: gate.stats()["mock"].in_flight == 1)
        scope.cancel()


async def _sent(gate: gg.Gateway, script: Script, scope: anyio.CancelScope) -> None:
    """The request is on the wire; no headers yet."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: gate.chat(USER))
        await wait_until(lambda: len(script.requests) == 1)
        scope.cancel()


async def _mid_stream_cancelled(
    gate: gg.Gateway, script: Script, scope: anyio.CancelScope
) -> None:
    await _read_one_delta(gate, scope)


async def _mid_stream_left(gate: gg.Gateway, script: Script, scope: anyio.CancelScope) -> None:
    await _read_one_delta(gate, None)


@pytest.mark.parametrize(
    ("stage", "answer", "sent", "possibly_billed"),
    [
        (_queued, "hang", 1, 1),  # only the call that held the permit was sent
        (_paced, "429", 1, 0),  # a 429 is not billed; the paced call never went out
        (_sent, "hang", 1, 1),
        (_mid_stream_cancelled, "stream", 1, 1),
        (_mid_stream_left, "stream", 1, 1),
    ],
    ids=["queued", "paced", "sent", "mid-stream-cancelled", "mid-stream-left"],
)
async def test_an_attempt_left_at_any_stage_hands_back_everything(
    stage: Stage, answer: str, sent: int, possibly_billed: int
) -> None:
    stuck = _Stuck()
    responses = {
        "hang": stuck.hang,
        "stream": stuck.stream,
        "429": error(429, retry_after="30"),
    }
    script = Script(responses[answer])
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    gate = gateway(backend(script, concurrency=1), tracer_provider=tracer_provider)
    async with gate:
        with anyio.fail_after(5), anyio.CancelScope() as scope:
            await stage(gate, script, scope)
        stats = gate.stats()["mock"]
        entry = gate.ledger.entries["mock"]
        # a request we hung up on keeps its slot for the backend's abandon_grace_s, then frees it
        await wait_until(lambda: gate.stats()["mock"].in_flight == 0)
    attempts = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    held = stats.abandoned_holding
    assert (stats.in_flight - held, stats.queued, stats.pool.checked_out) == (0, 0, 0)
    assert held == (1 if answer != "429" else 0)
    assert len(script.requests) == sent
    assert len(attempts) == sent  # every span that was started was ended
    assert all(body.closed for body in stuck.bodies)
    assert entry.attempts == possibly_billed
    assert (entry.wasted_tokens > 0) == (possibly_billed > 0)
    assert entry.calls_ok == 0
