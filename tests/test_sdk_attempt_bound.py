"""An SDK request on ``gate.http_client`` whose body never ends (a server trickling keep-alives
or whitespace faster than any read timeout) is cut (gptgate/body_bound.py): at the gateway's
deadline; a JSON body at the later of the backend's ``timeout`` and the SDK's own; a stream after
the latest of the backend's ``idle_timeout`` and ``timeout`` and the SDK's read timeout without
an event — while a long stream whose events keep coming is never cut. Before, it held its permit
for as long as the server kept trickling (over 60 s past a 3 s backend timeout and a 60 s
deadline on the simulator's ``endless`` fault, real clock)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import openai
import pytest

from gptgate.sim import LoopClock, run_virtual
from tests.mockbackend import USER, Script, backend, completion, gateway, sse


def _endless(clock: LoopClock, streamed: bool) -> Any:
    """A 200 whose body starts and then trickles forever: SSE keep-alive comments after a
    first chunk, or whitespace after the start of a JSON completion."""
    first = sse(["a"], finish=False, done=False) if streamed else json.dumps(completion())[:20]
    filler = b": keep-alive\n\n" if streamed else b" "

    async def body() -> AsyncIterator[bytes]:
        yield first if isinstance(first, bytes) else first.encode()
        while True:
            await clock.sleep(0.5)
            yield filler

    def serve(request: httpx2.Request) -> httpx2.Response:
        kind = "text/event-stream" if streamed else "application/json"
        return httpx2.Response(200, content=body(), headers={"content-type": kind})

    return serve


async def _ask(client: openai.AsyncOpenAI, streamed: bool) -> BaseException | None:
    try:
        if streamed:
            stream = await client.chat.completions.create(
                model="m", messages=USER, stream=True  # type: ignore[arg-type]
            )
            try:
                async for _ in stream:
                    pass
            finally:
                await stream.close()
        else:
            await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    except openai.APIError as exc:
        return exc
    return None


@pytest.mark.parametrize(
    ("streamed", "sdk_timeout", "backend_timeout", "deadline_s", "cut_at"),
    [
        (False, 600.0, 3.0, 60.0, 60.0),  # the gateway's deadline first
        (False, 600.0, 3.0, None, 600.0),  # the SDK's own timeout, longer than the backend's
        (False, 10.0, 120.0, None, 120.0),  # the backend's, longer than the SDK's
        (True, 600.0, 3.0, 60.0, 60.0),  # the deadline
        (True, 600.0, 3.0, None, 600.0),  # no event for the SDK's read timeout
        (True, 10.0, 120.0, None, 120.0),  # no event for the backend's timeout
        (True, 10.0, 5.0, None, 30.0),  # no event for its idle_timeout (30 s)
    ],
)
def test_an_endless_body_is_cut_and_its_permit_handed_back(
    streamed: bool, sdk_timeout: float, backend_timeout: float, deadline_s: float | None,
    cut_at: float,
) -> None:
    async def main() -> tuple[BaseException | None, float, tuple[int, int]]:
        clock = LoopClock()
        script = Script(_endless(clock, streamed))
        mock = backend(script, timeout=backend_timeout, idle_timeout=30.0)
        options: dict[str, Any] = {"deadline_s": deadline_s} if deadline_s else {}
        async with gateway(mock, clock=clock, **options) as gate:
            client = openai.AsyncOpenAI(
                api_key="x", base_url="http://127.0.0.1:9/v1", max_retries=0,
                timeout=sdk_timeout, http_client=gate.http_client("mock"),
            )
            start = clock.now()
            with anyio.fail_after(5_000):  # a body nobody cuts fails the test, not hangs it
                raised = await _ask(client, streamed)
            took = clock.now() - start
            await clock.sleep(1.0)  # the slot of a request hung up on: abandon_grace_s
            stats = gate.stats()["mock"]
            return raised, took, (stats.in_flight, stats.queued)

    raised, took, held = run_virtual(main)
    assert isinstance(raised, openai.APITimeoutError), raised
    assert took == pytest.approx(cut_at, abs=0.6)
    assert held == (0, 0)


def test_a_long_stream_whose_events_keep_coming_is_not_cut() -> None:
    """Total bounds are for JSON bodies: a stream of 1,000 s (one event a second) outlasts the
    backend's ``timeout`` and the SDK's, and is read to its end."""
    parts = [f"w{i} " for i in range(1_000)]

    async def main() -> tuple[BaseException | None, float, tuple[int, int]]:
        clock = LoopClock()
        whole = sse(parts)

        async def body() -> AsyncIterator[bytes]:
            events = whole.split(b"\n\n")
            for event in events:
                yield event + b"\n\n"
                await clock.sleep(1.0)

        def serve(request: httpx2.Request) -> httpx2.Response:
            return httpx2.Response(
                200, content=body(), headers={"content-type": "text/event-stream"}
            )

        mock = backend(Script(serve), timeout=3.0, idle_timeout=30.0)
        async with gateway(mock, clock=clock) as gate:
            client = openai.AsyncOpenAI(
                api_key="x", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=600.0,
                http_client=gate.http_client("mock"),
            )
            start = clock.now()
            with anyio.fail_after(5_000):
                raised = await _ask(client, streamed=True)
            took = clock.now() - start
            stats = gate.stats()["mock"]
            return raised, took, (stats.in_flight, stats.queued)

    raised, took, held = run_virtual(main)
    assert raised is None
    assert took > 1_000
    assert held == (0, 0)
