"""``@gate.guard`` around an SDK on its OWN HTTP client (not ``gate.http_client``) whose
function returns a stream: the guard's permit follows the stream until it is read to its end
or closed — whatever client made it — and comes back when the caller drops it unread.

It used to be handed back when the function returned: 40 such calls under
``concurrency=5`` put 37 streams on the server at once while ``stats()`` said 5.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual
from tests.streamserver import BASE_URL, USER, GeneratingServer


def _setup(
    server: GeneratingServer, clock: LoopClock, concurrency: int
) -> tuple[gg.Gateway, openai.AsyncOpenAI, httpx2.AsyncClient]:
    backend = gg.Backend(
        name="b", base_url=BASE_URL, model="m", concurrency=concurrency, timeout=10,
        transport=httpx2.MockTransport(server),
    )
    gate = gg.Gateway([backend], clock=clock, seed=1)
    own = httpx2.AsyncClient(transport=httpx2.MockTransport(server), base_url=BASE_URL)
    client = openai.AsyncOpenAI(api_key="x", base_url=BASE_URL, max_retries=0, http_client=own)
    return gate, client, own


def _returns(kind: str, gate: gg.Gateway, client: openai.AsyncOpenAI,
             own: httpx2.AsyncClient) -> Callable[[], Awaitable[Any]]:
    """A guarded function returning an unread stream of ``kind``."""

    @gate.guard(backend="b")
    async def sdk_stream() -> Any:
        return await client.chat.completions.create(model="m", messages=USER, stream=True)

    @gate.guard(backend="b")
    async def generator() -> AsyncIterator[Any]:
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)

        async def chunks() -> AsyncIterator[Any]:
            async for chunk in stream:
                yield chunk

        return chunks()

    @gate.guard(backend="b")
    async def response() -> httpx2.Response:
        request = own.build_request(
            "POST", "/chat/completions", json={"model": "m", "messages": USER, "stream": True}
        )
        return await own.send(request, stream=True)

    return {"sdk": sdk_stream, "generator": generator, "response": response}[kind]


async def _read_all(stream: Any) -> int:
    if isinstance(stream, httpx2.Response):
        parts = [part async for part in stream.aiter_bytes()]
        await stream.aclose()
        return len(parts)
    return len([chunk async for chunk in stream])


async def _forty(kind: str) -> tuple[int, int, int]:
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg, tokens=20, per_token_s=0.05)
        gate, client, own = _setup(server, clock, concurrency=5)
        call = _returns(kind, gate, client, own)
        read = 0
        async with gate:

            async def one() -> None:
                nonlocal read
                parts = await _read_all(await call())
                read += parts > 0

            with anyio.fail_after(120):
                async with anyio.create_task_group() as callers:
                    for _ in range(40):
                        callers.start_soon(one)
            in_flight = gate.stats()["b"].in_flight
        tg.cancel_scope.cancel()
    return server.peak, read, in_flight


@pytest.mark.parametrize("kind", ["sdk", "generator", "response"])
def test_a_returned_stream_keeps_the_guards_permit_until_read_to_its_end(kind: str) -> None:
    peak, read, in_flight = run_virtual(_forty, kind)
    assert read == 40
    assert peak <= 5  # was 37 with the SDK's own client
    assert in_flight == 0


async def _previews(kind: str) -> tuple[int, int, int]:
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg, tokens=200)
        gate, client, own = _setup(server, clock, concurrency=3)
        call = _returns(kind, gate, client, own)
        async with gate:

            async def preview() -> None:
                stream = await call()
                parts = stream.aiter_bytes() if isinstance(stream, httpx2.Response) else stream
                n = 0
                async for _ in parts:
                    n += 1
                    if n == 3:
                        break  # no close

            async with anyio.create_task_group() as callers:
                for _ in range(3):
                    callers.start_soon(preview)
            await clock.sleep(1.0)
            held, running = gate.stats()["b"].in_flight, server.running
            with anyio.fail_after(10):
                async with anyio.create_task_group() as callers:
                    for _ in range(3):
                        callers.start_soon(preview)
            done = server.requests
        tg.cancel_scope.cancel()
    return held, running, done


@pytest.mark.parametrize("kind", ["sdk", "generator", "response"])
def test_a_returned_stream_left_with_break_gives_the_permit_back(kind: str) -> None:
    held, running, requests = run_virtual(_previews, kind)
    assert held == 0 and running == 0
    assert requests == 6  # the second round got permits


def test_a_returned_event_stream_closed_at_its_end_marker_frees_the_permit_at_once() -> None:
    """An SDK closes an event stream at ``[DONE]`` without reading on (HTTP/2): that is a
    whole answer, not one left mid-way (whose slot would be held for abandon_grace_s)."""

    async def main() -> int:
        clock = LoopClock()
        async with anyio.create_task_group() as tg:
            server = GeneratingServer(tg, tokens=5)
            gate, client, own = _setup(server, clock, concurrency=1)
            call = _returns("response", gate, client, own)
            async with gate:
                response = await call()
                async for part in response.aiter_bytes():
                    if b"[DONE]" in part:
                        break
                await response.aclose()
                in_flight = gate.stats()["b"].in_flight
            tg.cancel_scope.cancel()
        return in_flight

    assert run_virtual(main) == 0
