"""A request queued for a dead primary's permit on ``gate.http_client("a", fallback=["b"])``
moves to the fallback when the primary's circuit opens, instead of waiting the cool-down.

Found running examples/sdk_fallback.py on real time (this session): 10 SDK requests at once
on a primary nobody listens on (its limit "auto"): 8 failed over within milliseconds, and 2
— past the failover's circuit check when the fifth refusal opened the primary's circuit —
waited ``max_breaker_wait_s`` (5 s) in the primary's transport for it to half-open before
they went to the fallback. Here, on virtual time: 8 latencies of 1-2 ms and two of 5.003 s.
The cause: they queued for one of the primary's 4 permits, were handed one after the circuit
opened, gave it back unsent (gptgate/probe_claim.py) and met the circuit again in
gptgate/sdk_circuit.py, which waited for the cool-down. Now a request whose client has a
fallback not open there moves on at once; with none (no ``fallback=``, or every fallback's
circuit open too), the wait is kept."""

from __future__ import annotations

import asyncio

import httpx2
import pytest

import gptgate as gg
from gptgate.sim import LoopClock, run_virtual

ANSWER = {
    "id": "c", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


async def _refused(request: httpx2.Request) -> httpx2.Response:
    await asyncio.sleep(0.001)  # the OS answers a connect to a closed port: a short while
    raise httpx2.ConnectError("connection refused", request=request)


async def _latencies(
    fallback: list[str] | None = None, fallback_open: bool = False
) -> list[float]:
    """The 10 requests' latencies (virtual seconds), answered or failed."""
    gate = gg.Gateway([
        gg.Backend(name="a", base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-a-0123",
                   transport=httpx2.MockTransport(_refused)),
        gg.Backend(name="b", base_url="http://127.0.0.1:8/v1", model="m", api_key="sk-b-0123",
                   concurrency=16,
                   transport=httpx2.MockTransport(lambda r: httpx2.Response(200, json=ANSWER))),
    ], clock=LoopClock(), seed=1)
    loop = asyncio.get_running_loop()
    async with gate:
        client = gate.http_client("a", fallback=fallback)
        if fallback_open:  # the fallback is down too: its circuit held open for the test
            now = gate.clock.now()
            gate.backend_state("b").breaker.force_open(now, now + 600.0)

        async def one() -> float:
            start = loop.time()
            try:
                reply = await client.post(
                    "http://127.0.0.1:9/v1/chat/completions",
                    headers={"authorization": "Bearer sk-a-0123"},
                    json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                )
            except httpx2.ConnectError:  # sent to the dead primary
                assert not fallback or fallback_open
            else:  # answered by the fallback, else refused unsent (a's or b's circuit open)
                healthy = bool(fallback) and not fallback_open
                assert reply.status_code == (200 if healthy else 503), reply.text
            return loop.time() - start

        return list(await asyncio.gather(*(one() for _ in range(10))))


def test_requests_queued_on_a_dead_primary_fail_over_without_waiting_its_cooldown() -> None:
    latencies = run_virtual(lambda: _latencies(["b"]))
    assert max(latencies) < 1.0, sorted(latencies)


@pytest.mark.parametrize(
    ("fallback", "fallback_open"), [(None, False), (["b"], True)],
    ids=["no-fallback", "fallback-open-too"],
)
def test_without_a_healthy_fallback_the_queued_requests_wait_for_the_cooldown(
    fallback: list[str] | None, fallback_open: bool
) -> None:
    """Nowhere to go: the two queued requests still wait for the half-open probe (5 s, the
    ``max_breaker_wait_s``), as before — not refused unsent at once."""
    latencies = sorted(run_virtual(lambda: _latencies(fallback, fallback_open)))
    assert max(latencies[:8]) < 1.0, latencies
    assert min(latencies[8:]) >= 5.0, latencies
