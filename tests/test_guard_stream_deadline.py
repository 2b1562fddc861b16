"""A stream a guarded function returns is not read past the call's deadline.

The guard cuts its body at the deadline, but the stream the body returned (an SDK on its own
HTTP client) was followed only for being left unread: a server trickling chunks faster than
the SDK's read timeout kept the call going — 114 s past its 40 s deadline in
``benchmarks/chaos.py`` (seed 3), until the gateway closed.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import openai

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual
from tests.streamserver import BASE_URL, USER, GeneratingServer

DEADLINE_S = 12.0


async def _read_all(
    opened: Any, clock: LoopClock
) -> tuple[Any, float, int, BaseException | None]:
    """Open a guarded stream and read it to its end or its error: the stream, how long from
    the call, how many pieces, and what the read raised."""
    start = clock.now()
    stream = await opened()
    read, error = 0, None
    try:
        async for _ in stream:
            read += 1
    except Exception as exc:
        error = exc
    return stream, clock.now() - start, read, error


def test_a_returned_sdk_stream_is_cut_at_the_guarded_calls_deadline() -> None:
    async def main() -> tuple[float, int, BaseException | None, int]:
        clock = LoopClock()
        async with anyio.create_task_group() as tg:
            # a chunk every 2 s for 400 s: never silent long enough for a read timeout
            server = GeneratingServer(tg, tokens=200, first_s=0.2, per_token_s=2.0)
            backend = gg.Backend(
                name="b", base_url=BASE_URL, model="m", concurrency=5, timeout=10,
                transport=httpx2.MockTransport(server),
            )
            own = httpx2.AsyncClient(transport=httpx2.MockTransport(server), base_url=BASE_URL)
            client = openai.AsyncOpenAI(
                api_key="x", base_url=BASE_URL, max_retries=0, http_client=own
            )
            async with gg.Gateway([backend], clock=clock, seed=1, deadline_s=DEADLINE_S) as gate:

                @gate.guard(backend="b")
                async def opened() -> Any:
                    return await client.chat.completions.create(
                        model="m", messages=USER, stream=True
                    )

                stream, took, read, error = await _read_all(opened, clock)
                await stream.close()
                # hung up mid-answer: the slot stays taken while the server may still run it
                # (``abandon_grace_s``), then comes back
                await clock.sleep(gate.backend_state("b").backend.abandon_grace_s + 1.0)
                held = gate.stats()["b"].in_flight
            await own.aclose()
            tg.cancel_scope.cancel()
        return took, read, error, held

    took, read, error, held = run_virtual(main)
    assert isinstance(error, openai.APITimeoutError)  # the SDK's own timeout error: typed
    assert took <= DEADLINE_S + 0.5  # was 400 s: every chunk read
    assert read < 10
    assert held == 0  # the permit came back after the cut


class _Trickle:
    """An async iterator with ``aclose`` (not a generator): a piece every 2 s, 200 pieces."""

    def __init__(self, clock: LoopClock) -> None:
        self._clock = clock
        self._left = 200

    def __aiter__(self) -> _Trickle:
        return self

    async def __anext__(self) -> str:
        if not self._left:
            raise StopAsyncIteration
        self._left -= 1
        await self._clock.sleep(2.0)
        return "piece"

    async def aclose(self) -> None:
        self._left = 0


def _read_returned(kind: str) -> tuple[float, int, BaseException | None, int]:
    """Read what a guarded function returned (an async generator, or an iterator with
    ``aclose``) that yields a piece every 2 s for 400 s: how long, how many pieces, what
    the read raised, and the permits held after the abandon grace."""

    async def main() -> tuple[float, int, BaseException | None, int]:
        clock = LoopClock()
        backend = gg.Backend(
            name="b", base_url=BASE_URL, model="m", concurrency=5, timeout=10,
            transport=httpx2.MockTransport(lambda request: httpx2.Response(500)),
        )
        async with gg.Gateway([backend], clock=clock, seed=1, deadline_s=DEADLINE_S) as gate:

            async def pieces() -> Any:
                for _ in range(200):
                    await clock.sleep(2.0)
                    yield "piece"

            @gate.guard(backend="b")
            async def opened() -> Any:
                return pieces() if kind == "generator" else _Trickle(clock)

            stream, took, read, error = await _read_all(opened, clock)
            await stream.aclose()
            await clock.sleep(backend.abandon_grace_s + 1.0)
            held = gate.stats()["b"].in_flight
        return took, read, error, held

    return run_virtual(main)


def test_a_returned_async_generator_is_cut_at_the_deadline_with_a_typed_error() -> None:
    took, read, error, held = _read_returned("generator")
    # gptgate's own error, as the guarded body cut at the deadline raises: not httpx2's
    assert isinstance(error, gg.RequestTimeout) and error.deadline
    assert took <= DEADLINE_S + 0.5  # was 400 s: every piece read
    assert read < 10
    assert held == 0


def test_a_returned_async_iterator_is_cut_at_the_deadline_with_a_typed_error() -> None:
    took, read, error, held = _read_returned("iterator")
    assert isinstance(error, gg.RequestTimeout) and error.deadline
    assert took <= DEADLINE_S + 0.5
    assert read < 10
    assert held == 0
