"""The gateway's verbs over httpx2's MockTransport: results, retries, streams, validation."""

from __future__ import annotations

import json
from dataclasses import dataclass

import anyio
import httpx2
import pytest

import gptgate as gg
from gptgate.sim import LoopClock, run_virtual
from tests.mockbackend import (
    USER,
    Script,
    backend,
    completion,
    error,
    gateway,
    ok,
    stream,
    wait_until,
)


async def test_chat_returns_text_usage_and_cost() -> None:
    script = Script(ok("hello world", prompt=2000, cached=1024))
    price = gg.Price(input_per_mtok=1.0, cached_input_per_mtok=0.1, output_per_mtok=10.0)
    async with gateway(backend(script, price=price)) as gate:
        r = await gate.chat(USER, max_tokens=50, temperature=0.2, tools=[{"type": "function"}])
    assert r.text == "hello world"
    assert r.finish_reason == "stop"
    assert (r.backend, r.hardware, r.attempts, r.streamed) == ("mock", "gpu", 1, False)
    assert r.usage.input_tokens == 2000 and r.usage.cached_input_tokens == 1024
    expected = (976 * 1.0 + 1024 * 0.1 + r.usage.output_tokens * 10.0) / 1e6
    assert r.cost_usd == pytest.approx(expected)
    sent = script.bodies[0]
    # every OpenAI parameter passes through; the backend's model is used
    assert sent["temperature"] == 0.2 and sent["tools"] == [{"type": "function"}]
    assert sent["max_tokens"] == 50 and sent["model"] == "m"
    assert "stream" not in sent and "stream_options" not in sent


async def test_retry_honours_retry_after_then_succeeds() -> None:
    script = Script(error(429, retry_after_ms="20"), ok())
    clock = gg.ScaledClock(1.0)
    async with gateway(backend(script), clock=clock) as gate:
        start = clock.now()
        r = await gate.chat(USER)
        waited = clock.now() - start
    assert r.attempts == 2 and len(script.requests) == 2
    assert waited >= 0.02  # slept at least the server's retry-after
    assert gate.stats()["mock"].rate_limited == 1


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_client_errors_are_not_retried(status: int) -> None:
    script = Script(error(status), ok())
    async with gateway(backend(script)) as gate:
        with pytest.raises(gg.BadRequestError) as info:
            await gate.chat(USER)
    assert len(script.requests) == 1
    assert info.value.status == status and info.value.backend == "mock"


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (500, gg.BackendError),
        (503, gg.BackendError),
        (408, gg.RequestTimeout),
        (409, gg.BackendError),
        (429, gg.RateLimitedError),
    ],
)
async def test_retryable_statuses_exhaust_attempts(status: int, error_type: type) -> None:
    script = Script(error(status))
    async with gateway(backend(script), max_attempts=3) as gate:
        with pytest.raises(error_type):
            await gate.chat(USER)
    assert len(script.requests) == 3
    assert gate.ledger.entries["mock"].calls_failed == 1


async def test_x_should_retry_overrides_the_status() -> None:
    script = Script(error(500, x_should_retry="false"), ok())
    async with gateway(backend(script)) as gate:
        with pytest.raises(gg.BackendError):
            await gate.chat(USER)
    assert len(script.requests) == 1
    script = Script(error(400, x_should_retry="true"), ok())
    async with gateway(backend(script)) as gate:
        assert (await gate.chat(USER)).attempts == 2


async def test_retry_after_beyond_the_cap_fails_fast() -> None:
    script = Script(error(429, retry_after="3600"), ok())
    async with gateway(backend(script), max_retry_after_s=30) as gate:
        with pytest.raises(gg.RateLimitedError) as info:
            await gate.chat(USER)
    assert info.value.retry_after == 3600 and len(script.requests) == 1


async def test_connection_errors_fail_over_to_another_backend() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    dead, alive = Script(refuse), Script(ok("from b"))
    async with gateway(backend(dead, name="a"), backend(alive, name="b")) as gate:
        results = [await gate.chat(USER) for _ in range(6)]
    assert all(r.text == "from b" for r in results)
    # a failed backend is excluded from the retry of the same call
    assert all(r.attempts <= 2 for r in results)
    # the breaker opens after repeated failures, so later calls skip the dead backend
    assert len(dead.requests) < 6


async def test_stream_yields_deltas_and_a_result() -> None:
    script = Script(stream(["Hel", "lo", "!"]))
    async with gateway(backend(script)) as gate, gate.stream(USER) as s:
        parts = [t async for t in s]
    assert parts == ["Hel", "lo", "!"] and s.text == "Hello!"
    assert s.result.text == "Hello!" and s.result.streamed and s.result.ttft_s is not None
    assert s.result.usage.output_tokens == 3
    assert script.bodies[0]["stream"] is True
    assert script.bodies[0]["stream_options"] == {"include_usage": True}


async def test_stream_failure_before_first_token_is_retried_invisibly() -> None:
    script = Script(error(503), stream(["ok"]))
    async with gateway(backend(script)) as gate, gate.stream(USER) as s:
        parts = [t async for t in s]
    assert parts == ["ok"] and s.result.attempts == 2


async def test_stream_cut_after_first_token_raises_with_partial_text() -> None:
    script = Script(stream(["partial ", "answer"], finish=False, done=False), stream(["never"]))
    async with gateway(backend(script)) as gate:
        seen: list[str] = []
        with pytest.raises(gg.StreamInterruptedError) as info:
            async with gate.stream(USER) as s:
                async for t in s:
                    seen.append(t)
        entry = gate.ledger.entries["mock"]
    assert seen == ["partial ", "answer"]
    assert info.value.partial_text == "partial answer"
    assert len(script.requests) == 1  # never retried: the caller already saw output
    assert entry.interrupted_streams == 1 and entry.wasted_tokens > 0


async def test_chat_redoes_an_interrupted_internal_stream() -> None:
    script = Script(stream(["cut"], finish=False, done=False), stream(["whole"]))
    async with gateway(backend(script)) as gate:
        r = await gate.chat(USER, stream=True)
    assert r.text == "whole" and r.attempts == 2 and r.streamed
    # the cut attempt's tokens are part of what the call cost
    assert r.billed_usage.output_tokens > r.usage.output_tokens


async def test_leaving_a_stream_early_gives_the_connection_back() -> None:
    script = Script(stream(["a", "b", "c", "d"]))
    async with gateway(backend(script)) as gate:
        async with gate.stream(USER) as s:
            async for _ in s:
                break
        stats = gate.stats()["mock"]
        await wait_until(lambda: gate.stats()["mock"].in_flight == 0)  # after the grace
    assert stats.in_flight == stats.abandoned_holding == 1 and stats.pool.checked_out == 0


@pytest.mark.parametrize(
    "messages",
    [
        "hello",
        [],
        [{"content": "x"}],
        [{"role": "wizard", "content": "x"}],
        [{"role": "user", "content": 5}],
        [{"role": "user"}],
        ["not a dict"],
    ],
)
async def test_malformed_messages_fail_before_sending(messages: object) -> None:
    script = Script(ok())
    async with gateway(backend(script)) as gate:
        with pytest.raises(gg.BadRequestError):
            await gate.chat(messages)  # type: ignore[arg-type]
    assert script.requests == []


async def test_unknown_scenario_and_backend_are_bad_requests() -> None:
    script = Script(ok())
    async with gateway(backend(script)) as gate:
        with pytest.raises(gg.BadRequestError, match="unknown scenario"):
            await gate.chat(USER, scenario="nope")
        with pytest.raises(gg.BadRequestError, match="unknown backend"):
            await gate.chat(USER, backend="nope")
    assert script.requests == []


async def test_the_gateway_must_be_open() -> None:
    gate = gateway(backend(Script(ok())))
    with pytest.raises(gg.GateError, match="not open"):
        await gate.chat(USER)


async def test_api_key_is_sent_but_never_shown() -> None:
    key = "sk-live-THISISASECRET1234567890"
    echo = httpx2.Response(401, json={"error": {"message": f"Incorrect API key provided: {key}"}})
    script = Script(echo)
    b = backend(script, api_key=key)
    assert key not in repr(b) and key not in str(b.model_dump())
    async with gateway(b) as gate:
        with pytest.raises(gg.BadRequestError) as info:
            await gate.chat(USER)
    assert script.requests[0].headers["authorization"] == f"Bearer {key}"
    assert key not in str(info.value) and key not in repr(info.value)
    assert key not in repr(gate)


async def test_api_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-env-123")
    script = Script(ok())
    async with gateway(backend(script, api_key_env="MY_KEY")) as gate:
        await gate.chat(USER)
    assert script.requests[0].headers["authorization"] == "Bearer sk-env-123"


async def test_map_keeps_order_and_holds_errors() -> None:
    def answer(request: httpx2.Request) -> httpx2.Response:
        content = json.loads(request.content)["messages"][-1]["content"]
        if content == "bad":
            return error(400)
        return ok(content.upper())

    script = Script(answer)
    items = [{"messages": [{"role": "user", "content": c}]} for c in ["a", "bad", "c", "d"]]
    items.append({"messages": "not a list"})
    async with gateway(backend(script)) as gate:
        results = await gate.map(items)
    assert [r.text if isinstance(r, gg.ChatResult) else type(r) for r in results] == [
        "A",
        gg.BadRequestError,
        "C",
        "D",
        gg.BadRequestError,
    ]


async def test_map_pulls_items_only_as_fast_as_they_can_run() -> None:
    release = anyio.Event()
    pulled = 0

    async def slow(request: httpx2.Request) -> httpx2.Response:
        await release.wait()
        return ok()

    def items():  # type: ignore[no-untyped-def]
        nonlocal pulled
        for _ in range(10_000):
            pulled += 1
            yield {"messages": USER}

    script = Script(slow)
    async with gateway(backend(script, concurrency=4)) as gate, anyio.create_task_group() as tg:
        tg.start_soon(lambda: gate.map(items(), max_pending=16))
        await wait_until(lambda: pulled >= 16)
        await anyio.sleep(0.05)
        assert pulled <= 17  # bounded: not 10,000 requests built up-front
        assert script.max_in_flight <= 4
        tg.cancel_scope.cancel()


async def test_fixed_limit_bounds_concurrency_and_queues_the_rest() -> None:
    gate_open = anyio.Event()

    async def blocked(request: httpx2.Request) -> httpx2.Response:
        await gate_open.wait()
        return ok()

    script = Script(blocked)
    async with gateway(backend(script, concurrency=3)) as gate:
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(lambda: gate.chat(USER))
            await wait_until(lambda: gate.stats()["mock"].queued == 17)
            stats = gate.stats()["mock"]
            assert (stats.in_flight, stats.limit) == (3, 3)
            gate_open.set()
        stats = gate.stats()["mock"]
    assert script.max_in_flight == 3
    assert (stats.in_flight, stats.queued, stats.admitted) == (0, 0, 20)


async def test_cancelling_200_in_flight_chats_releases_everything() -> None:
    never = anyio.Event()

    async def hang(request: httpx2.Request) -> httpx2.Response:
        await never.wait()
        return ok()

    script = Script(hang)
    async with gateway(backend(script, concurrency=50, max_concurrency=50)) as gate:
        async with anyio.create_task_group() as tg:
            for _ in range(200):
                tg.start_soon(lambda: gate.chat(USER))
            await wait_until(lambda: gate.stats()["mock"].queued == 150)
            tg.cancel_scope.cancel()
        stats = gate.stats()["mock"]
        await wait_until(lambda: gate.stats()["mock"].in_flight == 0)  # after the grace
    assert stats.abandoned_holding == 50  # the 50 sent: the backend still runs them
    assert (stats.in_flight - 50, stats.queued, stats.pool.checked_out) == (0, 0, 0)


async def test_call_deadline_bounds_retries() -> None:
    async def slow_fail(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep(0.02)
        return error(503)

    script = Script(slow_fail)
    async with gateway(backend(script), max_attempts=20) as gate:
        with pytest.raises((gg.BackendError, gg.RequestTimeout)):
            await gate.chat(USER, timeout=0.1)
    assert 2 <= len(script.requests) < 20


async def test_attempt_timeout_is_typed_and_counted_as_billed() -> None:
    async def hang(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep(10)
        return ok()

    script = Script(hang)
    async with gateway(backend(script, timeout=0.05), max_attempts=2) as gate:
        with pytest.raises(gg.RequestTimeout):
            await gate.chat(USER)
        entry = gate.ledger.entries["mock"]
    assert len(script.requests) == 2
    # the prompt was sent, so each timed-out attempt is counted as (estimated) billed input
    assert entry.wasted_tokens > 0 and entry.estimated_attempts == 2


async def test_stream_rule_is_recorded_on_the_result() -> None:
    script = Script(ok(), stream(["x"]))
    async with gateway(backend(script)) as gate:
        short = await gate.chat(USER, max_tokens=50, scenario="realtime_chat")
    assert short.streamed and short.stream_decision == "latency_sensitive"
    script = Script(ok())
    async with gateway(backend(script)) as gate:
        batch = await gate.chat(USER, max_tokens=2000, scenario="batch_content")
    assert not batch.streamed and batch.stream_decision == "batch"


async def test_keep_warm_refreshes_hot_prefixes_and_counts_the_cost() -> None:
    script = Script(ok(prompt=1400, cached=1280))
    system = {"role": "system", "content": "Policy handbook. " * 350}  # ~1,500 tokens
    gate = gateway(backend(script), keep_warm=True, keep_warm_interval_s=0.05)
    async with gate:
        for i in range(6):
            await gate.chat(
                [system, {"role": "user", "content": f"q{i}"}], scenario="batch_content"
            )
        await wait_until(lambda: gate.keep_warm_calls >= 1)
        entry = gate.ledger.entries["mock"]
    refresh = [b for b in script.bodies if b.get("max_tokens") == 1]
    assert refresh and refresh[0]["messages"][0] == system
    assert refresh[0]["messages"][-1]["role"] == "user"
    assert entry.calls_ok >= 7  # the refresh is an ordinary, counted call


async def test_keep_warm_is_off_by_default() -> None:
    script = Script(ok(prompt=1400))
    system = {"role": "system", "content": "Policy handbook. " * 350}
    async with gateway(backend(script)) as gate:
        for i in range(6):
            await gate.chat(
                [system, {"role": "user", "content": f"q{i}"}], scenario="batch_content"
            )
        await anyio.sleep(0.1)
    assert all(b.get("max_tokens") != 1 for b in script.bodies)


async def test_retry_budget_stops_a_retry_storm() -> None:
    script = Script(error(503))
    gate = gateway(
        backend(script, concurrency=8),
        max_attempts=5,
        retry_budget_ratio=0.1,
        retry_budget_min_per_s=0.0,
        breaker_threshold=10_000,  # this test is about the budget, not the breaker
    )
    async with gate:
        results = await gate.map([{"messages": USER}] * 200)
    assert all(isinstance(r, gg.BackendError) for r in results)
    retries = len(script.requests) - 200
    # without the budget: 800 retries; with it: at most 10% of the 200 calls
    assert 0 < retries <= 20


async def test_an_open_circuit_with_no_alternative_fails_fast() -> None:
    script = Script(error(500))
    gate = gateway(backend(script), breaker_threshold=3, breaker_cooldown_s=30, max_attempts=1)
    async with gate:
        for _ in range(3):
            with pytest.raises(gg.BackendError):
                await gate.chat(USER)
        with pytest.raises(gg.BackendError, match="circuit is open") as info:
            await gate.chat(USER)
        assert gate.stats()["mock"].circuit == "open"
    assert len(script.requests) == 3  # the fourth call never reached the dead backend
    assert info.value.retry_after is not None and info.value.retry_after > 29


async def test_calls_are_paced_below_the_reported_request_budget() -> None:
    clock = gg.ScaledClock(1.0)
    sent: list[float] = []

    def limited(request: httpx2.Request) -> httpx2.Response:
        sent.append(clock.now())
        headers = {
            "x-ratelimit-limit-requests": "600",  # 10 a second
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "200ms",
        }
        return httpx2.Response(200, json=completion(), headers=headers)

    async with gateway(backend(Script(limited)), clock=clock) as gate:
        await gate.chat(USER)  # learns: nothing left until the reset
        await gate.chat(USER)
        stats = gate.stats()["mock"]
    # the second call waited for the budget instead of drawing a 429
    assert sent[1] - sent[0] >= 0.1
    assert stats.rate_limited == 0


async def test_a_429_storm_pauses_the_backend_once() -> None:
    clock = gg.ScaledClock(1.0)
    start = clock.now()

    def storm(request: httpx2.Request) -> httpx2.Response:
        if clock.now() - start < 0.15:
            return error(429, retry_after_ms="150")
        return ok()

    script = Script(storm)
    async with gateway(backend(script, concurrency=4), clock=clock) as gate:
        results = await gate.map([{"messages": USER}] * 40)
        stats = gate.stats()["mock"]
    assert all(isinstance(r, gg.ChatResult) for r in results)
    # only calls already on the wire when the storm began see a 429; the rest wait it out
    assert stats.rate_limited <= 4
    assert len(script.requests) <= 44


async def test_a_prefix_warm_up_streams_so_the_group_is_released_at_its_first_token() -> None:
    script = Script(ok(prompt=1500, cached=1280))
    system = {"role": "system", "content": "House style guide. " * 330}  # ~1,600 tokens
    async with gateway(backend(script, concurrency=8)) as gate:
        items = [{"messages": [system, {"role": "user", "content": f"q{i}"}]} for i in range(6)]
        results = await gate.map(items, scenario="batch_content")
    assert all(isinstance(r, gg.ChatResult) for r in results)
    streamed = [bool(body.get("stream")) for body in script.bodies]
    assert streamed[0] and not any(streamed[1:])  # only the warm-up streams


def test_adaptive_timeouts_tighten_only_bounded_answers() -> None:
    run_virtual(_adaptive_timeouts_tighten_only_bounded_answers)  # exact, not wall-clock


async def _adaptive_timeouts_tighten_only_bounded_answers() -> None:
    clock = LoopClock()

    async def timed(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        delay = 8.0 if body["messages"][-1]["content"] == "slow" else 1.0
        await clock.sleep(delay)
        return ok()

    script = Script(timed)
    gate = gateway(backend(script, timeout=30.0, concurrency=8), clock=clock, max_attempts=1)
    async with gate:
        await gate.map([{"messages": USER, "max_tokens": 10}] * 60)  # learn: ~1 s per call
        slow = [{"role": "user", "content": "slow"}]
        unbounded = await gate.chat(slow)  # no max_tokens: the backend's 30 s applies
        with pytest.raises(gg.RequestTimeout):
            await gate.chat(slow, max_tokens=10)  # bounded: cut well before 30 s
    assert unbounded.text


async def test_a_call_racing_shutdown_ends_in_a_typed_error() -> None:
    script = Script(ok())
    gate = gateway(backend(script))
    await gate.start()
    await gate.chat(USER)
    await gate.aclose()
    with pytest.raises(gg.GateError, match="not open"):
        await gate.chat(USER)
    # a call that already passed admission when the pools closed
    await gate.start()
    state = gate.backend_state("mock")
    await state.pool.aclose()
    with pytest.raises(gg.GateError, match="closed"):
        await gate.chat(USER)
    await gate.aclose()
    assert state.limiter.in_flight == 0


@pytest.mark.parametrize("backends", [1, 2])
def test_a_call_held_by_the_cache_gate_is_shed_at_its_deadline(backends: int) -> None:
    run_virtual(_cache_gate_wait_is_bounded_by_the_deadline, backends)  # exact


async def _cache_gate_wait_is_bounded_by_the_deadline(backends: int) -> None:
    """A later call of a cold prefix waits behind the warm-up (with two backends, behind both
    backends' warm-ups at once); with a 1 s deadline and warm-ups that take 20 s to prefill, it
    ends in ``OverloadedError`` at its deadline — not when a warm-up finishes — and no gate
    keeps a trace of it."""
    clock = LoopClock()

    async def slow_prefill(request: httpx2.Request) -> httpx2.Response:
        await clock.sleep(20.0)
        return stream(["hi"]) if json.loads(request.content).get("stream") else ok()

    ramp = gg.RampPolicy(min_prefix_tokens=0)
    relaxed = gg.Scenario(name="relaxed", ramp=ramp)
    hurried = gg.Scenario(name="hurried", ramp=ramp, deadline_s=1.0)
    prompt = [{"role": "system", "content": "shared prefix"}, *USER]
    names = ["mock", "other"][:backends]
    gate = gateway(
        *(backend(Script(slow_prefill), name=n, timeout=60.0) for n in names), clock=clock
    )
    async with gate, anyio.create_task_group() as tg:
        for _ in names:
            tg.start_soon(lambda: gate.chat(prompt, scenario=relaxed))  # the warm-ups
            await clock.sleep(0.05)
        assert [gate.stats()[n].in_flight for n in names] == [1] * backends
        start = clock.now()
        with pytest.raises(gg.OverloadedError, match="prompt-cache gate"):
            await gate.chat(prompt, scenario=hurried)
        assert clock.now() - start == pytest.approx(1.0, abs=0.01)
        assert [gate.stats()[n].cache_waiting for n in names] == [0] * backends
    assert [gate.stats()[n].in_flight for n in names] == [0] * backends


def test_stats_say_where_the_limit_is_and_why_it_moved() -> None:
    run_virtual(_limit_phase_and_events)  # exact, not wall-clock


async def _limit_phase_and_events() -> None:
    """``stats()`` tells a fixed limit from an adaptive one, whether ``auto`` is still in slow
    start, and counts why it moved: on a 12-slot server slow start overshoots and ends."""
    from gptgate.testing import sim_backend

    clock = LoopClock()
    auto, _ = sim_backend("gpu-small", name="auto", clock=clock, seed=3, concurrency="auto")
    fixed, _ = sim_backend("gpu-small", name="fixed", clock=clock, seed=3, concurrency=8)
    items = [
        {"messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 200}
        for i in range(120)
    ]
    async with gg.Gateway([auto, fixed], clock=clock, seed=3) as gate:
        early = gate.stats()
        assert (early["auto"].limit_phase, early["auto"].limit_events["slow_start_exit"]) == (
            "slow start",
            0,
        )
        assert (early["fixed"].limit_phase, early["fixed"].limit_events) == ("fixed", {})
        for name in ("auto", "fixed"):
            results = await gate.map(items, backend=name)
            assert all(isinstance(r, gg.ChatResult) for r in results)
        late = gate.stats()
    assert min(late["auto"].calls, late["fixed"].calls) >= 120  # each ran its own map
    assert late["auto"].limit_phase == "probing"
    assert set(late["auto"].limit_events) == {"slow_start_exit", "loss", "queue", "delay"}
    assert sum(late["auto"].limit_events.values()) >= 1  # slow start ended for a reason
    assert late["fixed"].limit_phase == "fixed"


def test_auto_limit_grows_under_the_prompt_cache_gate() -> None:
    """``concurrency="auto"`` with a ramping scenario: every call of a ``map`` enters the cache
    gate at once, while slow start's first limit is in force. The limit it learns later must
    reach those waiting calls: a job used to run at that first limit (4) to its end."""
    assert run_virtual(_auto_job_time, "batch_content") <= 1.15 * run_virtual(
        _auto_job_time, "default"
    )


async def _auto_job_time(scenario: str) -> float:
    from gptgate.testing import sim_backend

    clock = LoopClock()
    backend, _ = sim_backend("tpu", name="sim", clock=clock, seed=7, concurrency="auto")
    guide = "Review the description for accuracy and tone. " * 150  # ~1,400 tokens: cacheable
    items = [
        {
            "messages": [
                {"role": "system", "content": f"[item {i}] {guide}"},  # a prefix group each
                {"role": "user", "content": f"Item #{i}: a steel and oak kit."},
            ],
            "max_tokens": 300,
        }
        for i in range(300)
    ]
    async with gg.Gateway([backend], clock=clock, seed=7) as gate:
        start = clock.now()
        results = await gate.map(items, scenario=scenario)
        assert all(isinstance(r, gg.ChatResult) for r in results)
        assert gate.stats()["sim"].limit > 16  # slow start went on
        return clock.now() - start


def test_a_map_held_at_the_cache_gate_uses_every_backend() -> None:
    """Late binding: under a ramping scenario a ``map``'s calls wait at the prompt-cache gate,
    where the router cannot see them. Bound when the job started, they all went to the backend
    that looked best then (296 of 300 to tpu, 2× the time); bound when a gate lets them
    through, the job splits over both as it does without the gate."""
    gated = run_virtual(_two_backend_job, "batch_content")
    plain = run_virtual(_two_backend_job, "default")
    assert gated.failed == 0 and plain.failed == 0
    assert min(gated.split.values()) >= 0.25 * 300  # both backends carry the job
    assert gated.time_s <= 1.15 * plain.time_s
    assert gated.hit_rate >= 0.85  # each backend still warms up and ramps its prefixes
    assert gated.hit_rate > plain.hit_rate


@dataclass
class _JobOutcome:
    time_s: float
    failed: int
    split: dict[str, int]
    hit_rate: float


async def _two_backend_job(scenario: str) -> _JobOutcome:
    from gptgate.testing import sim_backend

    clock = LoopClock()
    tpu, _ = sim_backend("tpu", name="tpu", clock=clock, seed=7, concurrency=10)
    gpu, _ = sim_backend("gpu", name="gpu", clock=clock, seed=8, concurrency=10)
    guide = "Write the copy in the brand's voice, concise and warm. " * 100  # cacheable
    items = [
        {
            "messages": [
                {"role": "system", "content": f"[brand {i % 3}] {guide}"},
                {"role": "user", "content": f"Item #{i}: a steel and oak kit."},
            ],
            "max_tokens": 150,
        }
        for i in range(300)
    ]
    async with gg.Gateway([tpu, gpu], clock=clock, seed=7) as gate:
        start = clock.now()
        results = await gate.map(items, scenario=scenario)
        elapsed = clock.now() - start
    ok = [r for r in results if isinstance(r, gg.ChatResult)]
    split: dict[str, int] = {}
    for r in ok:
        split[r.backend] = split.get(r.backend, 0) + 1
    cached = sum(r.usage.cached_input_tokens for r in ok)
    return _JobOutcome(
        elapsed, len(results) - len(ok), split, cached / sum(r.usage.input_tokens for r in ok)
    )


def test_calls_racing_two_cache_gates_leave_no_trace_when_cancelled() -> None:
    """A call held at the prompt-cache gate waits at every healthy backend's gate at once and
    takes the first that lets it through. Cancelled at random moments — waiting at both, just
    granted by one or both, or in flight — 200 such calls hand back every slot they held."""
    served, leftovers = run_virtual(_cancelled_racing_calls)
    assert min(served) > 0  # both backends took calls: the calls really raced
    assert leftovers == [0] * 8


async def _cancelled_racing_calls() -> tuple[list[int], list[int]]:
    import random

    rng = random.Random(5)

    async def slow(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep(rng.uniform(0.5, 2.0))
        return stream(["hi"]) if json.loads(request.content).get("stream") else ok()

    scripts = [Script(slow), Script(slow)]
    ramped = gg.Scenario(name="ramped", ramp=gg.RampPolicy(min_prefix_tokens=0, start=2))
    async with gateway(
        backend(scripts[0], name="a", concurrency=6),
        backend(scripts[1], name="b", concurrency=6),
        clock=LoopClock(),
    ) as gate:

        async def call(i: int, patience: float) -> None:
            messages = [{"role": "system", "content": f"guide {i % 4}"}, *USER]
            with anyio.move_on_after(patience):
                await gate.chat(messages, scenario=ramped)

        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(call, i, rng.choice([0.0, rng.uniform(0.0, 30.0), 1e9]))
        cache, stats = gate.cache_gate, gate.stats()
        leftovers = [
            n
            for name in ("a", "b")
            for n in (
                cache.in_flight(name),
                cache.waiting(name),
                stats[name].in_flight,
                stats[name].queued,
            )
        ]
    return [len(s.requests) for s in scripts], leftovers


def test_a_request_funds_retries_when_it_is_sent_not_when_it_starts_waiting() -> None:
    """The retry budget counts a request when its first attempt reaches the backend. A job
    whose calls all start at once and queue (here 40 calls through 1 permit, 1 s each) used to
    count them all at t=0: 30 s later the budget's 10 s window held none, and a failure late in
    the job could not be retried."""
    assert run_virtual(_late_failures_in_a_queued_job) == (40, 2)


async def _late_failures_in_a_queued_job() -> tuple[int, int]:
    sent = 0

    async def slow(request: httpx2.Request) -> httpx2.Response:
        nonlocal sent
        sent += 1
        await anyio.sleep(1.0)
        return error(500) if sent in (30, 36) else ok()

    async with gateway(
        backend(Script(slow), concurrency=1, timeout=30.0),
        clock=LoopClock(),
        retry_budget_ratio=0.5,
        retry_budget_min_per_s=0.0,  # no floor: only requests fund retries
    ) as gate:
        results = await gate.map([{"messages": USER} for _ in range(40)])
        retries = gate.stats()["mock"].retries
    return sum(isinstance(r, gg.ChatResult) for r in results), retries


@pytest.mark.parametrize(("status", "cuts"), [(500, False), (502, False), (503, True)])
async def test_a_server_error_is_no_reason_to_cut_the_limit_but_overload_is(
    status: int, cuts: bool
) -> None:
    """Two failed calls in three, no retries: 503s (overload) cut the auto limit; 500s and 502s
    count against goodput only — a backend that fails some calls at any load keeps its limit."""
    script = Script(*[error(status) if i % 3 else ok() for i in range(60)])
    async with gateway(backend(script, concurrency="auto"), max_attempts=1) as gate:
        results = await gate.map([{"messages": USER} for _ in range(60)])
        assert sum(isinstance(r, gg.BackendError) for r in results) == 40
        events = gate.stats()["mock"].limit_events
    assert (events["loss"] > 0) is cuts
