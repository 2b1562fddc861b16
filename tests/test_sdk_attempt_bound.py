"""An SDK request on ``gate.http_client`` whose body never ends (a server trickling keep-alives
or whitespace faster than any read timeout) is cut, as ``gate.chat`` cuts an attempt: at the
gateway's deadline, else at the later of the backend's ``timeout`` and the SDK's own. Before, it
held its permit for as long as the server kept trickling (over 60 s past a 3 s backend timeout
and a 60 s deadline on the simulator's ``endless`` fault, real clock)."""

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


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(
    ("sdk_timeout", "backend_timeout", "deadline_s", "cut_at"),
    [
        (600.0, 3.0, 60.0, 60.0),  # the gateway's deadline first
        (600.0, 3.0, None, 600.0),  # the SDK's own timeout, longer than the backend's
        (10.0, 120.0, None, 120.0),  # the backend's, longer than the SDK's
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
