"""``@gate.guard`` around the official openai SDK on ``gate.http_client``: one call, one permit.

The two adoption paths together used to deadlock: a guarded call held a permit and its inner
SDK request waited for a second permit of the same limiter, so once the guarded calls held them
all, nothing moved (8 or 64 at once hung for good; 2 completed).
"""

from __future__ import annotations

import anyio
import openai
import pytest

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual, sim_backend

USER = [{"role": "user", "content": "Tell me about connection pools."}]


async def _guarded_sdk_calls(n: int, stream: bool) -> tuple[int, gg.BackendStats, int]:
    clock = LoopClock()
    backend, engine = sim_backend("gpu", name="l", clock=clock, concurrency="auto")
    other, _ = sim_backend("gpu", name="m", clock=clock, seed=1, concurrency=2)
    gate = gg.Gateway([backend, other], clock=clock, seed=1)
    async with gate:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:8000/v1",
            http_client=gate.http_client("l"), max_retries=0,
        )

        @gate.guard(scenario="realtime_chat", backend="l")
        async def ask(i: int) -> str:
            if stream:
                chunks = await client.chat.completions.create(
                    model="m", messages=USER, max_tokens=20, stream=True
                )
                parts = [c.choices[0].delta.content or "" async for c in chunks if c.choices]
                return "".join(parts)
            answer = await client.chat.completions.create(model="m", messages=USER, max_tokens=20)
            return answer.choices[0].message.content or ""

        done = 0
        with anyio.fail_after(600):  # virtual seconds: a hang fails here, fast
            async with anyio.create_task_group() as tg:

                async def one(i: int) -> None:
                    nonlocal done
                    if await ask(i):
                        done += 1

                for i in range(n):
                    tg.start_soon(one, i)
        stats = gate.stats()["l"]
    return done, stats, engine.ledger.snapshot().requests


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("n", [2, 8, 64])
def test_guarded_sdk_calls_on_the_gateways_client_take_one_permit_each(
    n: int, stream: bool
) -> None:
    done, stats, requests = run_virtual(_guarded_sdk_calls, n, stream)
    assert done == n
    assert requests == n  # one request per guarded call reached the server
    assert stats.in_flight == 0 and stats.queued == 0
    assert stats.calls == n  # counted once, by the guard


def test_an_sdk_request_outside_any_guard_still_takes_its_own_permit() -> None:
    async def main() -> tuple[int, int]:
        clock = LoopClock()
        backend, _ = sim_backend("gpu", name="l", clock=clock, concurrency=1)
        gate = gg.Gateway([backend], clock=clock)
        async with gate:
            client = openai.AsyncOpenAI(
                api_key="sk-test", base_url="http://127.0.0.1:8000/v1",
                http_client=gate.http_client("l"), max_retries=0,
            )
            peak = 0

            async def watch() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, gate.stats()["l"].in_flight)
                    await clock.sleep(0.01)

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                async with anyio.create_task_group() as calls:
                    for _ in range(4):
                        calls.start_soon(
                            lambda: client.chat.completions.create(
                                model="m", messages=USER, max_tokens=10
                            )
                        )
                tg.cancel_scope.cancel()
            return peak, gate.stats()["l"].calls

    peak, calls = run_virtual(main)
    assert peak == 1 and calls == 4


def test_a_guarded_call_waits_for_an_open_circuit_only_within_bounds() -> None:
    """Found by the chaos suite: a guarded call on a dead backend slept out the whole circuit
    cool-down (10, 20, 40 s ...) past its deadline; gate.chat fails fast beyond
    ``max_breaker_wait_s``. Both do now."""

    async def main() -> tuple[float, BaseException | None, bool]:
        clock = LoopClock()
        backend, _ = sim_backend("gpu", name="l", clock=clock)
        gate = gg.Gateway([backend], clock=clock, breaker_cooldown_s=60.0)
        ran = False

        @gate.guard(backend="l")
        async def body() -> str:
            nonlocal ran
            ran = True
            return "x"

        async with gate:
            breaker = gate.backend_state("l").breaker
            for _ in range(breaker.threshold):
                breaker.on_failure(clock.now())
            start = clock.now()
            try:
                await body()
                error: BaseException | None = None
            except gg.GateError as exc:
                error = exc
            return clock.now() - start, error, ran

    took, error, ran = run_virtual(main)
    assert isinstance(error, gg.BackendError) and "circuit" in str(error)
    assert took < 1.0 and not ran


def test_a_guarded_call_ends_at_its_deadline() -> None:
    """Found by the chaos suite: a guarded call's retry started just before the deadline ran
    its whole SDK timeout past it (47.8 s on a 40 s deadline). The body is now cut at the
    deadline with RequestTimeout(deadline=True), and the backend is not blamed."""

    async def main() -> tuple[float, BaseException | None, gg.BackendStats]:
        clock = LoopClock()
        backend, _ = sim_backend("gpu", name="l", clock=clock)
        gate = gg.Gateway([backend], clock=clock, deadline_s=3.0)

        @gate.guard(backend="l")
        async def slow() -> str:
            await clock.sleep(100.0)
            return "late"

        async with gate:
            start = clock.now()
            try:
                await slow()
                error: BaseException | None = None
            except gg.GateError as exc:
                error = exc
            return clock.now() - start, error, gate.stats()["l"]

    took, error, stats = run_virtual(main)
    assert isinstance(error, gg.RequestTimeout) and error.deadline
    assert took == pytest.approx(3.0, abs=0.01)
    assert stats.failures == 0 and stats.circuit == "closed"
    # the cut body's request may still run at the backend: its slot is held for the grace
    assert stats.in_flight == stats.abandoned_holding == 1
