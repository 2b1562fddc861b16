"""Clients that leave early: the slot is freed and the server bills the work it did."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2

from gptgate.clock import ScaledClock
from gptgate.sim import LoopClock, SimEngine, SimProfile, SimTransport, get_profile, run_virtual

MESSAGES = [{"role": "user", "content": "explain continuous batching " * 20}]


def _client(engine: SimEngine) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=SimTransport(engine), base_url="http://sim/v1")


def _profile(**update: Any) -> SimProfile:
    return get_profile("gpu").model_copy(update={"jitter_sigma": 0.0, **update})


def test_closing_a_stream_early_bills_the_generated_tokens_and_frees_the_slot() -> None:
    async def main() -> tuple[Any, Any, int]:
        engine = SimEngine(_profile(), clock=LoopClock())
        body = {"messages": MESSAGES, "stream": True, "max_tokens": 400}
        async with (
            _client(engine) as client,
            client.stream("POST", "/chat/completions", json=body) as r,
        ):
            chunks = r.aiter_raw()
            await chunks.__anext__()
            await chunks.__anext__()
            await anyio.sleep(0.5)  # the server keeps generating while we dawdle
            # leaving the block closes the response before [DONE]
        return engine.ledger.snapshot(), engine.snapshot(), engine.profile.stream_chunks

    ledger, snap, _ = run_virtual(main)
    assert ledger.abandoned == 1 and ledger.ok == 0
    assert ledger.input_tokens > 0  # prefill happened: the prompt is billed
    assert 2 <= ledger.output_tokens < 400
    assert ledger.wasted_output_tokens == ledger.output_tokens
    assert snap.active == 0 and snap.queued == 0


def test_a_stream_closed_without_being_read_frees_its_slot() -> None:
    async def main() -> tuple[int, int]:
        engine = SimEngine(_profile(), clock=LoopClock())
        body = json.dumps({"messages": MESSAGES, "stream": True}).encode()
        r = await engine.handle("POST", "/v1/chat/completions", {}, body)
        assert r.stream is not None
        busy = engine.snapshot().active
        await r.stream.aclose()
        return busy, engine.snapshot().active

    assert run_virtual(main) == (1, 0)


def test_a_timeout_during_prefill_bills_nothing_after_it_bills_the_prompt() -> None:
    profile = _profile(ttft_overhead_s=2.0)

    async def leave_after(seconds: float) -> Any:
        engine = SimEngine(profile, clock=LoopClock())
        async with _client(engine) as client:
            with anyio.move_on_after(seconds):
                await client.post("/chat/completions", json={"messages": MESSAGES})
        assert engine.snapshot().active == 0
        return engine.ledger.snapshot()

    early = run_virtual(leave_after, 1.0)
    late = run_virtual(leave_after, 2.5)
    assert early.abandoned == 1 and early.billed_tokens == 0
    assert late.abandoned == 1 and late.input_tokens > 0 and late.output_tokens > 0


def test_cancelling_50_in_flight_client_tasks_leaves_nothing_active() -> None:
    async def main() -> tuple[Any, Any, Any, int]:
        engine = SimEngine(_profile(slots=8, max_queue=None), clock=LoopClock())
        async with _client(engine) as client:

            async def one(i: int) -> None:
                if i % 2:
                    body = {"messages": MESSAGES, "stream": True}
                    async with client.stream("POST", "/chat/completions", json=body) as r:
                        async for _ in r.aiter_raw():
                            pass
                else:
                    await client.post("/chat/completions", json={"messages": MESSAGES})

            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(one, i)
                await anyio.sleep(0.05)  # all started, none finished
                during = engine.snapshot()
                tg.cancel_scope.cancel()
            after = engine.snapshot()
            ledger = engine.ledger.snapshot()
            ok = await client.post("/chat/completions", json={"messages": MESSAGES})
        return during, after, ledger, ok.status_code

    during, after, ledger, status = run_virtual(main)
    assert during.active == 8 and during.queued == 42
    assert after.active == 0 and after.queued == 0
    assert ledger.abandoned == 50
    assert status == 200


def test_cancellation_under_a_scaled_clock() -> None:
    async def main() -> int:
        engine = SimEngine(_profile(slots=4), clock=ScaledClock(1000))
        async with _client(engine) as client:

            async def one() -> None:
                await client.post("/chat/completions", json={"messages": MESSAGES})

            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(one)
                await anyio.sleep(0.002)
                tg.cancel_scope.cancel()
        return engine.snapshot().active + engine.snapshot().queued

    assert anyio.run(main) == 0


def test_set_capacity_halves_slots_and_speed() -> None:
    async def duration(engine: SimEngine) -> float:
        body = json.dumps({"messages": MESSAGES, "max_tokens": 200}).encode()
        t0 = anyio.current_time()
        await engine.handle("POST", "/v1/chat/completions", {}, body)
        return anyio.current_time() - t0

    async def main() -> tuple[float, float, int, int]:
        engine = SimEngine(_profile(slots=8), clock=LoopClock())
        full = await duration(engine)
        engine.set_capacity(0.5)
        half = await duration(engine)
        slots_half = engine.snapshot().replicas[0].slots
        engine.set_capacity(1.0)
        return full, half, slots_half, engine.snapshot().replicas[0].slots

    full, half, slots_half, slots_back = run_virtual(main)
    assert slots_half == 4 and slots_back == 8
    assert 1.8 * full < half < 2.2 * full


def test_ledger_reset() -> None:
    async def main() -> tuple[int, int]:
        engine = SimEngine(_profile(), clock=LoopClock())
        body = json.dumps({"messages": MESSAGES}).encode()
        await engine.handle("POST", "/v1/chat/completions", {}, body)
        before = engine.ledger.snapshot().requests
        engine.ledger.reset()
        return before, engine.ledger.snapshot().requests

    assert run_virtual(main) == (1, 0)
