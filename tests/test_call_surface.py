"""The call surface a new user touches first: deadlines, argument checks and honest stats
(issue 11, defects 1, 5, 8 and 9). Timing tests run on the virtual clock: exact, no races."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import anyio
import httpx2
import pytest
from pydantic import ValidationError

import gptgate as gg
from gptgate.sim import LoopClock, run_virtual

from .mockbackend import USER, Script, backend, error, gateway, ok

# -- 1. a caller's own deadline is not the backend's failure ----------------------------------


@pytest.mark.parametrize("timeout", [-1, 0, 0.0, math.nan, math.inf, -math.inf, True, "5"])
async def test_an_invalid_timeout_is_a_bad_request_naming_it(timeout: object) -> None:
    script = Script(ok())
    async with gateway(backend(script)) as gate:
        with pytest.raises(gg.BadRequestError, match="timeout"):
            await gate.chat(USER, timeout=timeout)  # type: ignore[arg-type]
        with pytest.raises(gg.BadRequestError, match="timeout"):
            gate.stream(USER, timeout=timeout)  # type: ignore[arg-type]
        stats = gate.stats()["mock"]
    assert script.requests == []
    assert (stats.calls, stats.failures, stats.circuit) == (0, 0, "closed")


def test_a_caller_deadline_that_cuts_attempts_is_not_the_backends_failure() -> None:
    run_virtual(_deadline_cuts_attempts)


async def _deadline_cuts_attempts() -> None:
    """Ten calls with ``timeout=0.5`` on a backend that needs 1 s: each ends in a
    ``RequestTimeout(deadline=True)``, not retried; the breaker stays closed, the adaptive
    limit sees no loss, the backend is not charged a failure — but the ledger counts the
    prompts it was sent. The next ordinary call is served at once (it used to wait 5 s)."""
    clock = LoopClock()

    async def one_second(request: httpx2.Request) -> httpx2.Response:
        await clock.sleep(1.0)
        return ok()

    script = Script(one_second)
    gate = gateway(backend(script, concurrency="auto", timeout=30.0), clock=clock)
    async with gate:
        before = gate.stats()["mock"]
        for _ in range(10):
            with pytest.raises(gg.RequestTimeout) as caught:
                await gate.chat(USER, timeout=0.5)
            assert caught.value.deadline is True
            assert not caught.value.retryable
        stats = gate.stats()["mock"]
        start = clock.now()
        result = await gate.chat(USER)
        waited = clock.now() - start
    assert len(script.requests) == 11  # no retry of a call whose deadline passed
    assert stats.circuit == "closed"
    assert stats.limit == before.limit
    assert stats.limit_events.get("loss", 0) == 0
    assert (stats.calls, stats.failures, stats.timeouts) == (10, 0, 0)
    assert stats.wasted_tokens > 0  # sent, so possibly billed: still counted
    assert result.text and waited == pytest.approx(1.0, abs=0.01)


def test_a_deadline_that_passes_before_the_send_leaves_the_backend_alone() -> None:
    run_virtual(_deadline_before_send)


async def _deadline_before_send() -> None:
    """Five 500s open the circuit for 5 s. A call with ``timeout=5`` waits for it and wakes
    exactly at its deadline: nothing is sent, and the probe slot is left for the next call
    (today's code counted it as a sent, timed-out attempt and re-opened the circuit for 10 s)."""
    clock = LoopClock()
    script = Script(*([error(500)] * 5), ok())
    async with gateway(backend(script), clock=clock, max_attempts=1) as gate:
        for _ in range(5):
            with pytest.raises(gg.BackendError):
                await gate.chat(USER)
        assert gate.stats()["mock"].circuit == "open"
        with pytest.raises(gg.RequestTimeout) as caught:
            await gate.chat(USER, timeout=5.0)
        assert caught.value.deadline is True
        stats = gate.stats()["mock"]
        result = await gate.chat(USER)  # the half-open probe, at once
    assert len(script.requests) == 6
    assert (stats.calls, stats.failures, stats.timeouts, stats.circuit) == (5, 5, 0, "half_open")
    assert result.attempts == 1


# -- 5. the default deadline -----------------------------------------------------------------


def test_a_call_queued_behind_a_stuck_call_gives_up_at_the_default_deadline() -> None:
    run_virtual(_default_deadline)


async def _default_deadline() -> None:
    """No call, scenario or gateway deadline: a call is bounded by max_attempts × the largest
    backend timeout (+ the back-off cap between attempts). Queued behind a guarded call that
    never returns, it is shed then — it used to wait as long as the stuck call (100,000 s).
    A guarded call's wait for its permit has the same bound."""
    clock = LoopClock()
    script = Script(ok())
    gate = gateway(backend(script, concurrency=1, timeout=5.0), clock=clock, max_attempts=3)

    async with gate, anyio.create_task_group() as tg:

        @gate.guard()
        async def stuck() -> None:
            await clock.sleep(100_000)

        @gate.guard()
        async def quick() -> str:
            return "done"

        tg.start_soon(stuck)
        await clock.sleep(0.1)
        bound = 3 * 5.0 + 2 * gate.config.backoff_cap_s
        start = clock.now()
        with pytest.raises(gg.OverloadedError):
            await gate.chat(USER)
        assert 14.9 <= clock.now() - start <= bound + 1e-6
        start = clock.now()
        with pytest.raises(gg.OverloadedError):
            await quick()
        assert 14.9 <= clock.now() - start <= bound + 1e-6
        tg.cancel_scope.cancel()
    assert script.requests == []


async def test_an_explicit_deadline_beats_the_default() -> None:
    clock = LoopClock()
    gate = gateway(backend(Script(ok()), timeout=5.0), clock=clock, max_attempts=2)
    async with gate:
        default = gate._spec(USER, **_SPEC_DEFAULTS)
        chosen = gate._spec(USER, **{**_SPEC_DEFAULTS, "timeout": 100.0})
    # no deadline chosen: no deadline, but a stalled wait is bounded
    assert default.deadline is None
    assert default.stall_s == pytest.approx(2 * 5.0 + gate.config.backoff_cap_s)
    assert chosen.deadline == pytest.approx(clock.now() + 100.0, abs=0.1)
    assert chosen.stall_s is None


def test_a_long_job_whose_queue_moves_is_not_shed_by_the_default_bound() -> None:
    run_virtual(_long_moving_queue)


async def _long_moving_queue() -> None:
    """300 one-second calls through one permit: the last waits ~300 s, ten times the default
    bound (3 × 5 s + 2 × 8 s). The queue moves all along, so nothing is shed — a batch job is
    not cut short because it is long (a deadline that fixed counted from each call's start
    shed 144 of 300 on the cpu simulator)."""
    clock = LoopClock()

    async def one_second(request: httpx2.Request) -> httpx2.Response:
        await clock.sleep(1.0)
        return ok()

    gate = gateway(backend(Script(one_second), concurrency=1, timeout=5.0), clock=clock)
    items = [{"messages": USER} for _ in range(300)]
    async with gate:
        results = await gate.map(items, max_pending=300)
        stats = gate.stats()["mock"]
    assert [r for r in results if isinstance(r, gg.GateError)] == []
    assert stats.shed == 0 and clock.now() >= 300.0


_SPEC_DEFAULTS: dict[str, Any] = {
    "scenario": None,
    "stream": None,
    "private": False,
    "tier": "auto",
    "backend": None,
    "priority": None,
    "timeout": None,
    "max_attempts": None,
    "visible": False,
    "params": {},
}


# -- 8. arguments: typed errors naming the argument ------------------------------------------

_BAD_CALL_ARGUMENTS: list[tuple[str, dict[str, Any]]] = [
    ("extra_headers", {"extra_headers": {"x": 5}}),
    ("extra_headers", {"extra_headers": {5: "x"}}),
    ("extra_headers", {"extra_headers": ["x"]}),
    ("priority", {"priority": "high"}),
    ("priority", {"priority": True}),
    ("priority", {"priority": 1.5}),
    ("max_attempts", {"max_attempts": 0}),
    ("max_attempts", {"max_attempts": -1}),
    ("max_attempts", {"max_attempts": 21}),
    ("max_attempts", {"max_attempts": True}),
    ("max_attempts", {"max_attempts": "2"}),
    ("timeout", {"timeout": 0}),
    ("timeout", {"timeout": math.nan}),
]


@pytest.mark.parametrize(("name", "kwargs"), _BAD_CALL_ARGUMENTS)
async def test_a_bad_call_argument_is_a_bad_request_naming_it(
    name: str, kwargs: dict[str, Any]
) -> None:
    """Idle (nothing to contend with) as well as under load: the same typed error, from
    chat, stream, a map item and submit alike."""
    script = Script(ok())
    async with gateway(backend(script)) as gate:
        with pytest.raises(gg.BadRequestError, match=name):
            await gate.chat(USER, **kwargs)
        with pytest.raises(gg.BadRequestError, match=name):
            gate.stream(USER, **kwargs)
        results = await gate.map([{"messages": USER}, {"messages": USER, **kwargs}])
        assert isinstance(results[0], gg.ChatResult)
        assert isinstance(results[1], gg.BadRequestError) and name in str(results[1])
        handle = await gate.submit(USER, **kwargs)
        with pytest.raises(gg.BadRequestError, match=name):
            await handle
    assert len(script.requests) == 1


async def test_a_priority_string_is_refused_under_contention_too() -> None:
    script = Script(ok())
    async with gateway(backend(script, concurrency=1)) as gate, anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(lambda: gate.chat(USER, priority=3))
        with pytest.raises(gg.BadRequestError, match="priority"):
            await gate.chat(USER, priority="high")  # type: ignore[arg-type]
    assert len(script.requests) == 3


def test_an_unknown_default_scenario_is_a_validation_error_listing_the_known_ones() -> None:
    with pytest.raises(ValidationError) as caught:
        gg.Gateway([backend(Script(ok()))], default_scenario="nope")
    assert caught.value.title == "GatewayConfig"
    (problem,) = caught.value.errors()
    assert problem["loc"] == ("default_scenario",)
    assert "realtime_chat" in problem["msg"] and "batch_content" in problem["msg"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("concurrency", "8"),
        ("concurrency", True),
        ("concurrency", 8.0),
        ("concurrency", 0),
        ("min_concurrency", True),
        ("initial_concurrency", "4"),
        ("max_concurrency", True),
        ("max_connections", False),
        ("concurrency_window", (True, 4)),
    ],
)
def test_backend_int_fields_are_strict(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        backend(Script(ok()), **{field: value})
    assert caught.value.errors()[0]["loc"][0] == field


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_attempts", True), ("max_attempts", "3"), ("breaker_threshold", True), ("seed", True)],
)
def test_gateway_config_int_fields_are_strict(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        gg.Gateway([backend(Script(ok()))], **{field: value})
    assert caught.value.errors()[0]["loc"] == (field,)


def test_strict_ints_still_take_real_ints() -> None:
    b = backend(Script(ok()), concurrency=8, min_concurrency=2, max_connections=20)
    assert (b.concurrency, b.min_concurrency, b.max_connections) == (8, 2, 20)
    assert backend(Script(ok()), concurrency="auto").concurrency == "auto"
    assert gg.Gateway([b], max_attempts=4, seed=7).config.max_attempts == 4


async def test_http_client_checks_the_name_and_says_when_the_gateway_is_not_open() -> None:
    """Built at import time, before the gateway opens: a name that is not configured is
    refused at once (naming the known ones); a configured one works once the gateway is open
    — also after re-opening — and says so clearly if used while it is closed."""
    script = Script(ok())
    gate = gateway(backend(script), backend(Script(ok()), name="other"))
    with pytest.raises(gg.BadRequestError, match=r"unknown backend 'x'.*mock, other"):
        gate.http_client("x")
    client = gate.http_client("mock")
    with pytest.raises(gg.GateError, match="not open"):
        await client.post("http://127.0.0.1:9/v1/chat/completions", json={})
    for _ in range(2):
        async with gate:
            response = await client.post("http://127.0.0.1:9/v1/chat/completions", json={})
            assert response.status_code == 200
            assert gate.stats()["mock"].in_flight == 0
    assert len(script.requests) == 2
    assert gate.stats()["mock"].calls == 2


# -- 9. honest stats ---------------------------------------------------------------------------


def test_calls_shed_on_the_client_side_are_not_backend_calls_or_failures() -> None:
    run_virtual(_shed_not_counted)


async def _shed_not_counted() -> None:
    clock = LoopClock()

    async def slow(request: httpx2.Request) -> httpx2.Response:
        await clock.sleep(10.0)
        return ok()

    script = Script(slow)
    async with gateway(backend(script, concurrency=1, timeout=30.0), clock=clock) as gate:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: gate.chat(USER))
            await clock.sleep(0.1)
            for _ in range(3):
                with pytest.raises(gg.OverloadedError):
                    await gate.chat(USER, timeout=1.0)
        stats = gate.stats()["mock"]
    assert len(script.requests) == 1
    assert (stats.calls, stats.failures, stats.shed) == (1, 0, 3)


def _counters(stats: gg.BackendStats) -> dict[str, float]:
    """Every counter of a BackendStats (not the gauges: limit, in flight, queued, …)."""
    names = [
        "admitted", "shed", "calls", "failures", "retries", "rate_limited", "timeouts",
        "input_tokens", "cached_input_tokens", "output_tokens", "wasted_tokens",
        "streamed_attempts", "plain_attempts", "cost_usd",
    ]  # fmt: skip
    values: dict[str, float] = {name: getattr(stats, name) for name in names}
    values.update({f"pool.{k}": getattr(stats.pool, k) for k in ("waits", "wait_total_s")})
    values.update({f"event.{k}": v for k, v in stats.limit_events.items()})
    return values


async def test_stats_counters_never_go_backwards_when_the_gateway_is_reopened() -> None:
    script = Script(error(500), ok(), error(429), ok())
    gate = gateway(
        backend(script, concurrency="auto", price=gg.Price(input_per_mtok=1.0)),
        retry_budget_ratio=None,
    )
    async with gate:
        await gate.chat(USER)
        await gate.chat(USER)
        first = _counters(gate.stats()["mock"])
    async with gate:
        reopened = _counters(gate.stats()["mock"])
        await gate.chat(USER)
        later = _counters(gate.stats()["mock"])
    assert first["calls"] == 4 and first["failures"] == 2 and first["retries"] == 2
    for name, value in first.items():
        assert reopened.get(name, 0) >= value, name
        assert later.get(name, 0) >= reopened.get(name, 0), name
    assert later["calls"] == 5 and later["admitted"] == 5


async def test_a_retry_is_counted_on_the_backend_it_is_sent_to() -> None:
    """A dead backend whose failed calls are retried elsewhere shows no retries of its own:
    they are on the backend that got them."""
    dead, good = Script(error(500)), Script(ok())
    gate = gateway(
        backend(dead, name="dead"), backend(good, name="good"),
        retry_budget_ratio=None, breaker_threshold=100,
    )  # fmt: skip
    async with gate:
        results = [await gate.chat(USER) for _ in range(6)]
        stats = gate.stats()
    assert all(r.backend == "good" for r in results)
    assert len(dead.requests) >= 1
    assert stats["dead"].retries == 0
    assert stats["good"].retries == len(dead.requests)
    assert stats["dead"].failures == len(dead.requests)


def test_backend_stats_docstring_says_where_retries_are_counted() -> None:
    fields = {f.name for f in dataclasses.fields(gg.BackendStats)}
    assert "retries" in fields
    assert "sent to" in (gg.BackendStats.__doc__ or "")
