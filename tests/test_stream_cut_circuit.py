"""One rule for a stream that ends early, on every path (``gate.stream``, ``@gate.guard``
around a streaming SDK call on the SDK's own client, an SDK on ``gate.http_client``): cut by
the server or the network (a reset, an idle timeout mid-stream, an event stream that ends
without its terminal event) it is the backend's failure and counts towards its circuit; left
by its caller (a ``break`` and close) it counts for nothing — no failure, and no success that
would reset a run of failures either.

Before: a cut ``gate.stream`` never counted (the circuit stayed closed on a backend that
cut every stream after its first token); a guard's stream counted as a success the moment
the function returned it, and its cut not at all; a stream the SDK read to a clean EOF
without ``[DONE]`` was a success on ``gate.http_client``. Real ``openai`` package, loopback
mock transports, real redis-server for the fleet.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import anyio
import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.shared.health import HEALTH_POLL_S
from tests.fleettools import namespace
from tests.streamends import SSE, URL, USER, EndingBody

THRESHOLD = 3


class Server:
    """The backend: how it ends each stream from now on (``end``), after ``tokens`` tokens."""

    def __init__(self, end: str, tokens: int = 2) -> None:
        self.end = end
        self.tokens = tokens

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(lambda _: httpx2.Response(
            200, headers=SSE, stream=EndingBody(self.end, self.tokens)))


def _gate(server: Server, **options: object) -> gg.Gateway:
    backend = gg.Backend(name="llm", base_url=URL, model="m", api_key="sk-test",
                         transport=server.transport(), idle_timeout=0.05)
    gate = gg.Gateway([backend], breaker_threshold=THRESHOLD, breaker_cooldown_s=600.0,
                      max_breaker_wait_s=0.0, max_attempts=1, **options)  # type: ignore[arg-type]
    gate.server = server  # type: ignore[attr-defined]
    return gate


#: one streamed call, read whole (``leave=False``) or left after its first token
Call = Callable[[gg.Gateway, bool], Awaitable[None]]


async def _via_stream(gate: gg.Gateway, leave: bool) -> None:
    async with gate.stream(USER, backend="llm") as s:
        async for _ in s:
            if leave:
                break


async def _read(stream: openai.AsyncStream[object], leave: bool) -> None:
    async with stream:  # closed on the way out, as a caller's ``break`` leaves it
        async for _ in stream:
            if leave:
                break


async def _via_guard(gate: gg.Gateway, leave: bool) -> None:
    """A guarded function returning an SDK stream its own HTTP client reads."""
    own = httpx2.AsyncClient(transport=gate.server.transport())  # type: ignore[attr-defined]
    client = openai.AsyncOpenAI(base_url=URL, api_key="sk-test", max_retries=0,
                                http_client=own)

    @gate.guard(backend="llm")
    async def ask() -> openai.AsyncStream[object]:
        return await client.chat.completions.create(  # type: ignore[call-overload,no-any-return]
            model="m", messages=USER, stream=True)

    await _read(await ask(), leave)


async def _via_http_client(gate: gg.Gateway, leave: bool) -> None:
    client = openai.AsyncOpenAI(base_url=URL, api_key="sk-test", max_retries=0,
                                http_client=gate.http_client("llm"))
    stream = await client.chat.completions.create(  # type: ignore[call-overload]
        model="m", messages=USER, stream=True)
    await _read(stream, leave)


PATHS: dict[str, Call] = {
    "gate.stream": _via_stream, "guard": _via_guard, "http_client": _via_http_client,
}
#: how a server cuts a stream; the guard's own SDK client has no idle bound of gptgate's
CUTS = [(path, end) for path in PATHS for end in ("reset", "truncated", "stall")
        if (path, end) != ("guard", "stall")]


async def _cut(call: Call, gate: gg.Gateway) -> None:
    # the SDK's reading of the cut, or gate.stream's StreamInterruptedError
    with contextlib.suppress(gg.GateError, openai.APIError, httpx2.HTTPError):
        await call(gate, False)


@pytest.mark.parametrize(("path", "end"), CUTS)
async def test_a_stream_the_server_cuts_counts_towards_the_circuit(path: str, end: str) -> None:
    gate = _gate(Server(end))
    async with gate:
        for _ in range(THRESHOLD):
            await _cut(PATHS[path], gate)
        stats = gate.stats()["llm"]
    assert (stats.failures, stats.circuit) == (THRESHOLD, "open")


@pytest.mark.parametrize("path", PATHS)
async def test_a_stream_its_caller_leaves_counts_for_nothing(path: str) -> None:
    gate = _gate(Server("whole", tokens=4))
    async with gate:
        for _ in range(2 * THRESHOLD):
            await PATHS[path](gate, True)
        stats = gate.stats()["llm"]
        breaker = gate.backend_state("llm").breaker
    assert (stats.failures, stats.circuit, breaker.failures) == (0, "closed", 0)


@pytest.mark.parametrize("path", PATHS)
async def test_a_callers_break_does_not_reset_a_run_of_server_cuts(path: str) -> None:
    """Cut, left, cut, left, cut: three failures in a row for the circuit — a stream its
    caller left says nothing of the backend, neither failed nor answered (a guard's stream
    was a success as soon as the function returned it, so the run never reached three)."""
    call, server = PATHS[path], Server("reset")
    gate = _gate(server)
    async with gate:
        for i in range(2 * THRESHOLD - 1):
            server.end, server.tokens = ("whole", 4) if i % 2 else ("reset", 2)
            if i % 2:
                await call(gate, True)
            else:
                await _cut(call, gate)
        circuit = gate.stats()["llm"].circuit
    assert circuit == "open"


async def test_a_callers_break_in_one_process_does_not_open_the_fleets_circuit(
    redis_url: str,
) -> None:
    """Two processes on one Redis: A's callers leave their streams (every path) and the
    fleet's circuit stays closed; then A's backend cuts its streams and the fleet sees it
    open (A's own count of them: it stayed closed before on ``gate.stream``)."""
    shared = gg.Shared(redis_url, namespace=namespace())
    server = Server("whole", tokens=4)
    a, b = _gate(server, shared=shared), _gate(Server("whole"), shared=shared)
    async with a, b:
        for call in PATHS.values():
            for _ in range(THRESHOLD):
                await call(a, True)
        await anyio.sleep(4 * HEALTH_POLL_S)
        left = (a.stats()["llm"].circuit, b.stats()["llm"].circuit)
        server.end = "reset"
        for _ in range(THRESHOLD):
            await _cut(_via_stream, a)
        await anyio.sleep(4 * HEALTH_POLL_S)  # a published open: at the next poll
        cut = (a.stats()["llm"].circuit, b.stats()["llm"].circuit)
    assert left == ("closed", "closed")
    assert cut == ("open", "open")
