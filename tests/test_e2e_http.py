"""End to end over real loopback HTTP: the gateway against ``gptgate sim serve``'s server.

These exercise what MockTransport cannot: httpcore2's connection pool (pool waits, connections
returned on every path), real streaming with a connection cut mid-body, and cancellation of
calls that hold sockets.

The servers run 50x fast (``SCALE``); the gateways keep real time. A gateway on the servers'
``ScaledClock`` measured its timeouts in compressed wall time: a 60 s attempt timeout was 1.2 s
of it (adaptively tightened towards 5 s: 0.1 s), a 5 s connect timeout 0.1 s, so a loop that a
loaded machine starved for a second timed out calls the servers had answered (298 of 300 in a
full-suite run at load 14 on 2 cores). In real time those bounds only fire on a hung server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import gptgate as gg
from gptgate.sim import SimEngine, SimServer, get_profile
from tests.mockbackend import wait_until

SCALE = 50.0
USER = [{"role": "user", "content": "Tell me about connection pools."}]


def engine(name: str = "gpu", **overrides: Any) -> SimEngine:
    profile = get_profile(name).model_copy(
        update={"rpm": None, "tpm": None, "max_queue": None, "output_tokens_mean": 40, **overrides}
    )
    return SimEngine(profile, clock=gg.ScaledClock(SCALE), seed=5)


@pytest.fixture
def server() -> Iterator[tuple[str, SimEngine]]:
    sim = engine()
    with SimServer(sim, time_scale=SCALE) as base_url:
        yield base_url, sim


def gateway(base_url: str, **backend_options: Any) -> gg.Gateway:
    options: dict[str, Any] = {"concurrency": 8, "timeout": 60.0}
    options.update(backend_options)
    backend = gg.Backend(name="sim", base_url=base_url, model="m", **options)
    return gg.Gateway([backend], seed=3)  # real time: see the module's docstring


async def test_chat_and_stream_over_http(server: tuple[str, SimEngine]) -> None:
    base_url, sim = server
    async with gateway(base_url) as gate:
        plain = await gate.chat(USER, max_tokens=30)
        async with gate.stream(USER, max_tokens=30) as s:
            parts = [t async for t in s]
        stats = gate.stats()["sim"]
    assert plain.text and not plain.streamed and plain.usage.output_tokens > 0
    assert len(parts) > 1 and "".join(parts) == s.result.text and s.result.streamed
    assert s.result.usage.output_tokens > 0 and s.result.ttft_s is not None
    assert stats.pool.checked_out == 0 and stats.in_flight == 0
    assert sim.ledger.snapshot().output_tokens >= plain.usage.output_tokens


async def test_cancelling_200_in_flight_chats_over_http(server: tuple[str, SimEngine]) -> None:
    base_url, _ = server
    async with gateway(base_url, concurrency=40, max_concurrency=40) as gate:
        async with anyio.create_task_group() as tg:
            for _ in range(200):
                tg.start_soon(lambda: gate.chat(USER, max_tokens=2000))
            with anyio.fail_after(10):
                while gate.stats()["sim"].in_flight < 40:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        stats = gate.stats()["sim"]
        opened, idle = gate.backend_state("sim").pool.connection_counts()
        # the 40 requests we hung up on keep their slots for the grace, then free them
        await wait_until(lambda: gate.stats()["sim"].in_flight == 0)
    assert stats.abandoned_holding == 40
    assert (stats.in_flight - 40, stats.queued, stats.pool.checked_out) == (0, 0, 0)
    assert stats.pool.waiting == 0
    assert opened == idle  # every connection still open is idle: none is stuck checked out


async def test_pool_wait_is_measured_when_concurrency_exceeds_connections(
    server: tuple[str, SimEngine],
) -> None:
    base_url, _ = server
    async with gateway(base_url, concurrency=8, max_connections=2) as gate:
        async with anyio.create_task_group() as tg:
            for _ in range(16):
                tg.start_soon(lambda: gate.chat(USER, max_tokens=20))
        stats = gate.stats()["sim"]
    assert stats.pool.pseudo_concurrency and stats.pool.size == 2
    assert stats.pool.waits >= 16 and stats.pool.wait_max_s > 0
    assert stats.pool.waiting == 0 and stats.pool.checked_out == 0


async def test_pool_sized_from_concurrency_never_waits(server: tuple[str, SimEngine]) -> None:
    base_url, _ = server
    async with gateway(base_url, concurrency=8) as gate:

        async def calls(n: int) -> None:
            async with anyio.create_task_group() as tg:
                for _ in range(n):
                    tg.start_soon(lambda: gate.chat(USER, max_tokens=20))

        await calls(8)  # opens the connections: a TCP connect counts as a wait, and on a
        before = gate.stats()["sim"].pool  # loaded machine one took 0.2 s
        await calls(32)
        stats = gate.stats()["sim"]
    assert stats.pool.size == 10 and not stats.pool.pseudo_concurrency
    # a kept-alive connection is handed over at once: no request queued behind another's
    # (one that did would wait about a call's latency)
    waits = stats.pool.waits - before.waits
    waited = stats.pool.wait_total_s - before.wait_total_s
    assert waits >= 32 and waited / waits < 0.1 * (stats.latency_p50_s or 1.0)


async def test_a_stream_reset_mid_body_is_retried_or_typed(server: tuple[str, SimEngine]) -> None:
    base_url, _ = server
    reset = {"x-sim-fault": "reset"}
    async with gateway(base_url) as gate:
        # a visible stream cut after its first token: typed, with the partial text
        with pytest.raises(gg.StreamInterruptedError) as info:
            async with gate.stream(USER, max_tokens=200, extra_headers=reset) as s:
                async for _ in s:
                    pass
        assert info.value.partial_text == s.text and info.value.billed
        # a 5xx before anything was shown: retried, then the error is typed
        with pytest.raises(gg.BackendError) as failure:
            await gate.chat(USER, extra_headers={"x-sim-fault": "500"}, max_attempts=2)
        assert failure.value.status == 500
        stats = gate.stats()["sim"]
    assert stats.pool.checked_out == 0 and stats.in_flight == 0
    assert stats.retries >= 1


async def test_sdk_client_over_http(server: tuple[str, SimEngine]) -> None:
    openai = pytest.importorskip("openai")
    base_url, _ = server
    async with gateway(base_url, concurrency=2) as gate:
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key="sk-test", http_client=gate.http_client("sim")
        )
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(
                    lambda: client.chat.completions.create(model="m", messages=USER, max_tokens=10)
                )
        stats = gate.stats()["sim"]
    assert stats.admitted == 6 and stats.in_flight == 0 and stats.pool.checked_out == 0


async def test_a_cache_gated_job_spreads_over_two_backends_over_http() -> None:
    """Late binding over real sockets: a ``batch_content`` job whose calls wait at the
    prompt-cache gates of a fast and a slower backend goes out through both, each warming its
    own copy of the prefix, and hands back every connection, permit and gate slot."""
    guide = "Write the copy in the brand's voice, concise and warm. " * 100  # cacheable
    items = [
        {
            "messages": [
                {"role": "system", "content": guide},
                {"role": "user", "content": f"Item #{i}: a steel and oak kit."},
            ],
            "max_tokens": 30,
        }
        for i in range(300)
    ]
    first, second = engine("tpu"), engine("gpu")  # tpu is faster: it looks best
    with SimServer(first, time_scale=SCALE) as url_a, SimServer(second, time_scale=SCALE) as url_b:
        backends = [
            gg.Backend(name=name, base_url=url, model="m", concurrency=8, timeout=60.0)
            for name, url in (("a", url_a), ("b", url_b))
        ]
        async with gg.Gateway(backends, seed=3) as gate:  # real time: the module's docstring
            results = await gate.map(items, scenario="batch_content")
            stats = gate.stats()
            held = [gate.cache_gate.in_flight(n) + gate.cache_gate.waiting(n) for n in "ab"]
    ok = [r for r in results if isinstance(r, gg.ChatResult)]
    assert len(ok) == 300
    split = [sum(r.backend == name for r in ok) for name in "ab"]
    assert min(split) >= 30  # both carry the job (bound on arrival: 8 of 300 reached gpu)
    cached = sum(r.usage.cached_input_tokens for r in ok)
    assert cached / sum(r.usage.input_tokens for r in ok) > 0.8  # two warm-ups, then hits
    assert held == [0, 0]
    assert all(s.pool.checked_out == 0 and s.in_flight == 0 for s in stats.values())
