"""The dollar budget: ``Gateway(..., budget=gg.Budget(usd_per_hour=..., on_exceed=...))``.

Judged against the simulator's own billing ledger (what the server would bill), sampled
every 10 virtual seconds: the most spent in any sliding hour is the figure the budget
promises to hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx2
import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from pydantic import ValidationError

import gptgate as gg
from gptgate.budget import BudgetGate, SpendWindows
from gptgate.sim import SimEngine, SimTransport
from gptgate.testing import (
    LoopClock,
    max_rise_within,
    run_virtual,
    sim_backend,
    spend_curve,
)
from tests.mockbackend import USER, Script, ok
from tests.mockbackend import backend as mock_backend

PRICE = gg.Price(input_per_mtok=2.0, output_per_mtok=8.0)
TASK = [{"role": "user", "content": "Summarise the incident report in a paragraph. " * 20}]
MAX_TOKENS = 300
KEY = "sk-budget-secret-0123456789"


def _gateway(
    clock: LoopClock, budget: gg.Budget | None, concurrency: int = 4, **options: Any
) -> tuple[gg.Gateway, SimEngine]:
    backend, engine = sim_backend(
        "gpu", name="sim", clock=clock, seed=1, concurrency=concurrency, price=PRICE,
        api_key=KEY,
    )
    return gg.Gateway([backend], clock=clock, seed=1, budget=budget, **options), engine


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"usd_per_hour": 0}, "usd_per_hour"),
        ({"usd_per_hour": -5}, "usd_per_hour"),
        ({"usd_per_hour": float("nan")}, "usd_per_hour"),
        ({"usd_per_hour": float("inf")}, "usd_per_hour"),
        ({"usd_per_hour": True}, "usd_per_hour"),
        ({"usd_per_hour": "ten"}, "usd_per_hour"),
        ({}, "usd_per_hour"),
        ({"usd_per_hour": 10, "on_exceed": "warn"}, "on_exceed"),
        ({"usd_per_hour": 10, "burst_s": 0}, "burst_s"),
        ({"usd_per_hour": 10, "burst_s": 7200}, "burst_s"),
        ({"usd_per_hour": 10, "per_day": 1}, "per_day"),
    ],
)
def test_bad_budget_input_names_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        gg.Budget(**options)
    assert [e["loc"] for e in info.value.errors()] == [(field,)]


def test_a_budget_given_as_a_mapping_is_validated_by_the_gateway_config() -> None:
    backend = gg.Backend(name="sim", base_url="http://127.0.0.1:8000/v1", model="m", price=PRICE)
    with pytest.raises(ValidationError) as info:
        gg.Gateway([backend], budget={"usd_per_hour": -1})
    assert info.value.errors()[0]["loc"] == ("budget", "usd_per_hour")
    gate = gg.Gateway([backend], budget={"usd_per_hour": 10, "on_exceed": "raise"})
    assert gate.config.budget == gg.Budget(usd_per_hour=10, on_exceed="raise")
    assert gg.Gateway([backend]).budget_status() is None
    free = backend.model_copy(update={"price": None})
    with pytest.raises(ValidationError, match="budget needs a backend with a price"):
        gg.Gateway([free], budget=gg.Budget(usd_per_hour=10))


# -- the pure windows -------------------------------------------------------------------------


def test_room_frees_up_when_the_oldest_spend_leaves_the_hour() -> None:
    windows = SpendWindows(gg.Budget(usd_per_hour=10, on_exceed="raise"))
    windows.record(0.0, 4.0)  # counted at the end of its second: leaves at 3601
    windows.record(100.5, 5.0)
    assert windows.room_at(200.0, 1.0) == 200.0  # 9 + 1 fits 10
    assert windows.room_at(200.0, 2.0) == 3601.0  # the $4 of t=0 must leave first
    assert windows.room_at(200.0, 6.0) == 3701.0  # and the $5 of t=100.5
    key = windows.reserve(1.0)
    assert windows.room_at(200.0, 1.0) == 3601.0  # a reservation counts as spent
    windows.release(key)
    assert windows.room_at(200.0, 1.0) == 200.0
    assert windows.spent(3600.5) == 9.0 and windows.spent(3601.0) == 5.0
    assert windows.spent(3701.0) == 0.0


def test_costs_ending_in_the_same_second_are_one_entry() -> None:
    windows = SpendWindows(gg.Budget(usd_per_hour=10))
    for i in range(1000):
        windows.record(i / 100, 0.001)  # 100 calls a second for 10 s
    hour = windows.windows[0]
    assert len(hour.entries) == 10 and windows.spent(10.0) == pytest.approx(1.0)


def test_reservations_alone_leave_no_time_to_wait_for() -> None:
    windows = SpendWindows(gg.Budget(usd_per_hour=10, on_exceed="raise"))
    held = [windows.reserve(3.0) for _ in range(3)]
    assert windows.room_at(0.0, 2.0) is None  # frees up only as they settle
    windows.release(held[0])
    assert windows.room_at(0.0, 2.0) == 0.0


def test_the_burst_window_paces_a_throttled_budget() -> None:
    budget = gg.Budget(usd_per_hour=12, burst_s=300)  # $1 per 5 minutes
    windows = SpendWindows(budget)
    windows.record(0.0, 0.9)
    assert windows.room_at(10.0, 0.2) == 301.0  # the hour has room; the pace does not
    assert windows.room_at(10.0, 0.1) == 10.0
    # a call larger than the burst allowance goes once the burst window is empty
    assert windows.room_at(10.0, 1.5) == 301.0
    # "raise" is not paced: only the hour counts
    assert SpendWindows(budget.model_copy(update={"on_exceed": "raise"})).room_at(0.0, 5.0) == 0.0


# -- throttle ---------------------------------------------------------------------------------


async def _job(
    budget: gg.Budget | None, seconds: float, workers: int = 2, timeout: float | None = None
) -> dict[str, Any]:
    """``workers`` loops calling as fast as they can for ``seconds`` of virtual time."""
    clock = LoopClock()
    gate, engine = _gateway(clock, budget, concurrency=workers)
    errors: list[gg.GateError] = []
    done = 0
    async with gate:

        async def worker() -> None:
            nonlocal done
            while clock.now() < seconds:
                try:
                    await gate.chat(TASK, max_tokens=MAX_TOKENS, timeout=timeout)
                    done += 1
                except gg.GateError as error:
                    errors.append(error)
                    await clock.sleep(5.0)

        samples = await spend_curve(clock, engine, PRICE, [worker] * workers)
        status = gate.budget_status()
        stats = gate.stats()["sim"]
        ledger = gate.ledger.total().cost_usd
    return {
        "samples": samples, "errors": errors, "done": done, "status": status, "stats": stats,
        "ledger": ledger, "total": engine.ledger.snapshot().billed_usd(PRICE),
    }


def test_unbudgeted_the_job_spends_three_times_the_budget() -> None:
    """The baseline the throttle test is judged against: the same job without a budget."""
    out = run_virtual(_job, None, 3600.0)
    assert max_rise_within(out["samples"], 3600) > 2.9 * 2.8


def test_throttle_holds_the_hourly_spend_of_a_job_three_times_over_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    budget = gg.Budget(usd_per_hour=2.8)
    with caplog.at_level(logging.WARNING, logger="gptgate"):
        out = run_virtual(_job, budget, 2 * 3600.0)
    worst = max_rise_within(out["samples"], 3600)
    assert worst <= 1.02 * 2.8  # held: any sliding hour, by the server's own bill
    assert worst >= 0.95 * 2.8  # and used: throttled, not stopped
    first_hour = [c for t, c in out["samples"] if t <= 3600.0][-1]
    assert first_hour >= 0.95 * 2.8  # paced over the hour, not a burst then a stall
    assert out["errors"] == []  # no deadline: every call waited its turn
    status = out["status"]
    assert status.throttled > 0 and status.raised == 0 and status.reserved_usd == 0.0
    assert status.spent_usd == pytest.approx(2.8, rel=0.05)
    warnings = [r for r in caplog.records if "budget: throttling" in r.getMessage()]
    assert len(warnings) == 1  # one per episode, not one per call
    assert KEY not in caplog.text


def test_pacing_spreads_the_hour_instead_of_spending_it_at_once() -> None:
    # four workers: this job would spend six times the budget
    out = run_virtual(_job, gg.Budget(usd_per_hour=2.8, burst_s=300), 3600.0, 4)
    ten_minutes = [c for t, c in out["samples"] if t <= 600.0][-1]
    assert ten_minutes <= 2.8 * 900 / 3600  # two bursts' worth of 5 minutes, plus one
    unpaced = run_virtual(_job, gg.Budget(usd_per_hour=2.8, burst_s=3600), 3600.0, 4)
    early = [c for t, c in unpaced["samples"] if t <= 600.0][-1]
    assert early >= 0.9 * 2.8  # without pacing the hour goes in its first minutes
    assert max_rise_within(unpaced["samples"], 3600) <= 1.02 * 2.8


def test_a_throttled_call_whose_deadline_would_pass_fails_typed_before_it() -> None:
    out = run_virtual(_job, gg.Budget(usd_per_hour=2.8), 1800.0, 2, 60.0)
    refused = [e for e in out["errors"] if isinstance(e, gg.BudgetExceededError)]
    # the others were admitted just before their deadline, which then cut them
    late = [e for e in out["errors"] if isinstance(e, gg.RequestTimeout) and e.deadline]
    assert len(refused) > 10 * len(late) and len(refused) + len(late) == len(out["errors"])
    assert all("deadline" in e.message and not e.retryable for e in refused)
    assert out["status"].raised == len(refused)
    assert out["stats"].failures == 0  # the budget's doing, not the backend's
    assert max_rise_within(out["samples"], 3600) <= 1.02 * 2.8


# -- raise ------------------------------------------------------------------------------------


async def _spend_then_one_more(budget: gg.Budget) -> dict[str, Any]:
    clock = LoopClock()
    gate, engine = _gateway(clock, budget)
    async with gate:
        while True:
            try:
                await gate.chat(TASK, max_tokens=MAX_TOKENS)
            except gg.BudgetExceededError as error:
                first = error
                break
        sent = engine.ledger.snapshot().requests
        at = clock.now()
        with pytest.raises(gg.BudgetExceededError) as info:
            await gate.chat(TASK, max_tokens=MAX_TOKENS)
        return {
            "first": first, "error": info.value, "waited": clock.now() - at,
            "sent": engine.ledger.snapshot().requests - sent, "status": gate.budget_status(),
            "stats": gate.stats()["sim"], "total": engine.ledger.snapshot().billed_usd(PRICE),
        }


def test_raise_fails_fast_with_the_typed_error_and_sends_nothing() -> None:
    out = run_virtual(_spend_then_one_more, gg.Budget(usd_per_hour=0.05, on_exceed="raise"))
    error = out["error"]
    assert isinstance(error, gg.GateError) and not error.retryable
    assert out["waited"] == 0.0 and out["sent"] == 0
    assert out["total"] <= 0.05  # what was sent before fits the budget
    assert error.budget_usd == 0.05 and error.spent_usd == pytest.approx(out["total"], rel=0.05)
    assert error.retry_after is not None and 3000 < error.retry_after <= 3600
    text = str(error)
    assert "$0.05/h" in text and "spent" in text and "frees up in" in text
    assert KEY not in text and KEY not in repr(error)
    status = out["status"]
    assert status.raised == 2 and status.throttled == 0
    assert out["stats"].failures == 0


def test_a_call_dearer_than_the_whole_budget_is_refused_even_when_throttling() -> None:
    async def main() -> gg.BudgetExceededError:
        clock = LoopClock()
        gate, engine = _gateway(clock, gg.Budget(usd_per_hour=0.001))
        async with gate:
            with pytest.raises(gg.BudgetExceededError) as info:
                await gate.chat(TASK, max_tokens=MAX_TOKENS)
            assert clock.now() == 0.0 and engine.ledger.snapshot().requests == 0
        return info.value

    assert "more than the whole budget" in str(run_virtual(main))


# -- reservations -----------------------------------------------------------------------------


async def _burst_of(n: int, budget: gg.Budget) -> dict[str, Any]:
    """``n`` calls at the same instant, on a backend that runs them all at once."""
    clock = LoopClock()
    gate, engine = _gateway(clock, budget, concurrency=n)
    outcomes: list[object] = []
    async with gate:

        async def one() -> None:
            try:
                outcomes.append(await gate.chat(TASK, max_tokens=MAX_TOKENS))
            except gg.GateError as error:
                outcomes.append(error)

        samples = await spend_curve(clock, engine, PRICE, [one] * n)
        return {
            "ok": sum(isinstance(o, gg.ChatResult) for o in outcomes),
            "refused": sum(isinstance(o, gg.BudgetExceededError) for o in outcomes),
            "hourly": max_rise_within(samples, 3600),
            "peak": engine.ledger.snapshot().peak_in_flight,
            "status": gate.budget_status(),
        }


@pytest.mark.parametrize("on_exceed", ["raise", "throttle"])
def test_reservations_keep_100_concurrent_calls_within_the_budget(on_exceed: str) -> None:
    # about 30 calls' worth of reservations (prompt + max_tokens), 100 calls at once
    budget = gg.Budget(usd_per_hour=0.1, on_exceed=on_exceed, burst_s=3600)  # type: ignore[arg-type]
    out = run_virtual(_burst_of, 100, budget)
    assert out["hourly"] <= 0.1  # was 100 calls' worth: all admitted against $0 spent
    assert out["status"].reserved_usd == 0.0
    if on_exceed == "raise":
        assert 20 <= out["ok"] < 100 and out["ok"] + out["refused"] == 100
    else:  # the rest waited for the hour to turn, and then ran
        assert out["ok"] == 100 and out["refused"] == 0


# -- what counts ------------------------------------------------------------------------------


async def _cancelled_and_timed_out() -> dict[str, Any]:
    clock = LoopClock()
    gate, engine = _gateway(clock, gg.Budget(usd_per_hour=10))
    async with gate:
        await gate.chat(TASK, max_tokens=MAX_TOKENS)  # the backend's latency per token
        before = gate.budget_status().spent_usd
        with anyio.move_on_after(3.0):  # cancelled mid-answer
            await gate.chat(TASK, max_tokens=MAX_TOKENS)
        cancelled = gate.budget_status()
        with pytest.raises(gg.RequestTimeout):  # cut by its deadline after the send
            await gate.chat(TASK, max_tokens=MAX_TOKENS, timeout=3.0, max_attempts=1)
        async with gate.stream(TASK, max_tokens=MAX_TOKENS) as stream:
            async for _ in stream:
                break  # the caller leaves a stream after its first token
        return {
            "before": before, "cancelled": cancelled, "status": gate.budget_status(),
            "ledger": gate.ledger.total(), "total": engine.ledger.snapshot().billed_usd(PRICE),
        }


def test_cancelled_timed_out_and_left_streams_count_as_the_ledger_counts_them() -> None:
    out = run_virtual(_cancelled_and_timed_out)
    ledger, status = out["ledger"], out["status"]
    assert out["cancelled"].spent_usd > out["before"]  # the cancelled call's billed work
    assert out["cancelled"].reserved_usd == 0.0
    assert ledger.wasted_cost_usd > 0 and ledger.interrupted_streams == 1
    assert status.spent_usd == pytest.approx(ledger.cost_usd)  # every attempt, waste included
    assert status.spent_usd == pytest.approx(out["total"], rel=0.1)  # near the server's bill
    assert status.reserved_usd == 0.0


def _sdk_and_guarded_ask(
    gate: gg.Gateway, max_retries: int
) -> tuple[openai.AsyncOpenAI, Callable[[], Awaitable[str]]]:
    """The openai SDK on ``gate.http_client``, and a ``@gate.guard``-ed call through it."""
    client = openai.AsyncOpenAI(
        api_key="sk-test", base_url="http://127.0.0.1:8000/v1",
        http_client=gate.http_client("sim"), max_retries=max_retries,
    )

    @gate.guard(backend="sim")
    async def ask() -> str:
        answer = await client.chat.completions.create(
            model="m", messages=TASK, max_tokens=MAX_TOKENS  # type: ignore[arg-type]
        )
        return answer.choices[0].message.content or ""

    return client, ask


async def _guarded_and_sdk() -> dict[str, Any]:
    clock = LoopClock()
    gate, engine = _gateway(clock, gg.Budget(usd_per_hour=0.02, on_exceed="raise"))
    async with gate:
        client, ask = _sdk_and_guarded_ask(gate, max_retries=2)
        guarded = 0
        with pytest.raises(gg.BudgetExceededError):
            for _ in range(20):
                await ask()
                guarded += 1
        after_guard = engine.ledger.snapshot().requests
        with pytest.raises(openai.RateLimitError) as info:
            await client.chat.completions.create(
                model="m", messages=TASK, max_tokens=MAX_TOKENS  # type: ignore[arg-type]
            )
        return {
            "guarded": guarded, "sent_by_sdk": engine.ledger.snapshot().requests - after_guard,
            "sdk_error": info.value, "status": gate.budget_status(),
            "total": engine.ledger.snapshot().billed_usd(PRICE),
            "ledger": gate.ledger.total().cost_usd,
        }


def test_guarded_calls_and_sdk_traffic_count_and_are_refused_over_budget() -> None:
    out = run_virtual(_guarded_and_sdk)
    assert out["guarded"] >= 1
    assert out["status"].spent_usd == pytest.approx(out["ledger"]) and out["ledger"] > 0
    assert out["total"] <= 0.02 * 1.05  # a guarded call's cost is only known once it returns
    assert out["sent_by_sdk"] == 0  # refused with a 429 the SDK does not retry
    assert "budget" in str(out["sdk_error"])
    assert out["status"].raised == 2


def test_the_spend_metric_reports_settled_and_reserved_dollars() -> None:
    reader = InMemoryMetricReader()

    def points() -> Iterator[tuple[str, dict[str, Any], float]]:
        data = reader.get_metrics_data()  # the gauge reads the gateway's (loop) clock
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name.startswith("gptgate.client.budget."):
                        for point in metric.data.data_points:
                            attrs = dict(point.attributes or {})
                            yield metric.name, attrs, point.value  # type: ignore[union-attr]

    async def main() -> list[tuple[str, dict[str, Any], float]]:
        clock = LoopClock()
        gate, _ = _gateway(
            clock, gg.Budget(usd_per_hour=0.05, on_exceed="raise"),
            meter_provider=MeterProvider([reader]),
        )
        async with gate:
            with pytest.raises(gg.BudgetExceededError):
                for _ in range(100):
                    await gate.chat(TASK, max_tokens=MAX_TOKENS)
            return list(points())

    seen = run_virtual(main)
    spend = {a["gptgate.budget.state"]: v for n, a, v in seen if n.endswith(".spend")}
    assert 0 < spend["settled"] <= 0.05 and spend["reserved"] == 0.0
    refused = {a["gptgate.budget.outcome"]: v for n, a, v in seen if n.endswith(".refused")}
    assert refused == {"raised": 1}


# -- the queue --------------------------------------------------------------------------------


async def _queue_order() -> dict[str, Any]:
    clock = LoopClock()
    gate = BudgetGate(gg.Budget(usd_per_hour=1.0, burst_s=3600), clock)
    gate.record(1.0)  # the hour is spent at t=0: room from t=1 + 3600
    admitted: list[tuple[str, float]] = []
    failed: list[tuple[str, float, float | None]] = []

    async def call(name: str, priority: int, deadline: float | None = None) -> None:
        try:
            hold = await gate.admit(0.6, priority=priority, deadline=deadline)
        except gg.BudgetExceededError as error:
            failed.append((name, clock.now(), error.retry_after))
            return
        admitted.append((name, clock.now()))
        await clock.sleep(10.0)
        gate.record(0.5)  # its real cost, below the reservation
        assert hold is not None
        gate.release(hold)

    async with anyio.create_task_group() as group:
        group.start_soon(call, "low", 0)
        await clock.sleep(1.0)
        group.start_soon(call, "high", 10)  # later, but first
        group.start_soon(call, "late", 10, 500.0)  # behind "high": fails at its deadline
        await clock.sleep(1.0)
        # at the head it would be, but its deadline comes before any room: fails at once
        solo = BudgetGate(gg.Budget(usd_per_hour=1.0), clock)
        solo.record(1.0)
        with pytest.raises(gg.BudgetExceededError) as info:
            await solo.admit(0.1, deadline=clock.now() + 100.0)
        failed.append(("solo", clock.now(), info.value.retry_after))
    return {"admitted": admitted, "failed": failed, "status": gate.status()}


def test_the_queue_goes_by_priority_and_fails_a_hopeless_deadline_early() -> None:
    out = run_virtual(_queue_order)
    # "high" spent $0.50 in the second ending at 3612: "low" fits once that leaves the hour
    assert out["admitted"] == [("high", 3601.0), ("low", 3612.0 + 3600.0)]
    late = next(f for f in out["failed"] if f[0] == "late")
    assert late[1] == pytest.approx(500.0)  # behind another: at its deadline
    solo = next(f for f in out["failed"] if f[0] == "solo")
    assert solo[1] == 2.0 and solo[2] == pytest.approx(3601.0)  # at once, saying when
    status = out["status"]
    assert status.throttled == 3 and status.raised == 1 and status.waiting == 0


async def _overtaken_while_reservations_fill_the_hour() -> list[tuple[str, float]]:
    """The hour is full of reservations (no time to wait for: only a release frees room);
    the queue's head is overtaken by a higher priority, which is admitted at the release."""
    clock = LoopClock()
    gate = BudgetGate(gg.Budget(usd_per_hour=1.0, burst_s=3600), clock)
    first = await gate.admit(0.9)
    assert first is not None
    admitted: list[tuple[str, float]] = []

    async def call(name: str, priority: int) -> None:
        hold = await gate.admit(0.6, priority=priority)
        admitted.append((name, clock.now()))
        await clock.sleep(10.0)
        assert hold is not None
        gate.release(hold)  # cost nothing: a call refused by the server

    with anyio.fail_after(60.0):  # virtual seconds: a waiter nobody wakes fails here
        async with anyio.create_task_group() as group:
            group.start_soon(call, "low", 0)
            await clock.sleep(1.0)
            group.start_soon(call, "high", 10)
            await clock.sleep(1.0)
            gate.release(first)
    return admitted


def test_a_head_overtaken_while_only_a_release_can_free_room_is_not_forgotten() -> None:
    admitted = run_virtual(_overtaken_while_reservations_fill_the_hour)
    assert admitted == [("high", 2.0), ("low", 12.0)]  # was: "low" waited for good


async def _guarded_burst_on_a_fresh_gateway() -> dict[str, Any]:
    """50 guarded calls at once before any cost is known: each must reserve something."""
    clock = LoopClock()
    gate, engine = _gateway(clock, gg.Budget(usd_per_hour=0.02, on_exceed="raise"),
                            concurrency=64)
    async with gate:
        _, ask = _sdk_and_guarded_ask(gate, max_retries=0)
        outcomes = await asyncio.gather(*(ask() for _ in range(50)), return_exceptions=True)
        return {
            "ok": sum(isinstance(o, str) for o in outcomes),
            "refused": sum(isinstance(o, gg.BudgetExceededError) for o in outcomes),
            "total": engine.ledger.snapshot().billed_usd(PRICE),
        }


def test_a_burst_of_guarded_calls_before_any_cost_is_known_cannot_overshoot() -> None:
    # a guarded call's tokens are unknown until it returns; with no cost seen yet it reserved
    # nothing, and all 50 went out together: 2.4x the budget (before the fix)
    out = run_virtual(_guarded_burst_on_a_fresh_gateway)
    assert out["refused"] > 0 and out["ok"] + out["refused"] == 50
    assert out["total"] <= 0.02


# -- guarded calls under a small budget, and what "raised" counts ------------------------------

SMALL_PRICE = gg.Price(input_per_mtok=1.0, output_per_mtok=10.0)


async def _guarded_under(budget: gg.Budget, max_tokens: int, calls: int) -> dict[str, Any]:
    """``calls`` guarded calls, one after another, each asking for ``max_tokens`` through its
    own HTTP client (the guard sees only the usage it returns)."""
    clock = LoopClock()
    backend, engine = sim_backend("gpu", name="gpu", clock=clock, seed=1, price=SMALL_PRICE)
    gate = gg.Gateway([backend], clock=clock, budget=budget)
    client = httpx2.AsyncClient(base_url="http://127.0.0.1:8000/v1",
                                transport=SimTransport(engine))

    @gate.guard(backend="gpu")
    async def ask(i: int) -> dict[str, Any]:
        response = await client.post("/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": f"q{i}"}],
            "max_tokens": max_tokens,
        })
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    errors: list[gg.BudgetExceededError] = []
    async with gate:
        for i in range(calls):
            try:
                await ask(i)
            except gg.BudgetExceededError as error:
                errors.append(error)
        return {"errors": errors, "status": gate.budget_status(),
                "total": engine.ledger.snapshot().billed_usd(SMALL_PRICE)}


@pytest.mark.parametrize("on_exceed", ["raise", "throttle"])
def test_guarded_calls_that_fit_a_small_budget_run(on_exceed: str) -> None:
    """$0.01/h: a "typical" guarded call (1,024 + 1,024 tokens: $0.0113) is dearer than the
    whole budget, but these cost ~$0.0005. Before, every one was refused for good (nothing
    admitted, nothing learned); now the first reserves at most the budget, and the others
    what the first cost."""
    budget = gg.Budget(usd_per_hour=0.01, on_exceed=on_exceed)  # type: ignore[arg-type]
    out = run_virtual(_guarded_under, budget, 50, 5)
    assert out["errors"] == []
    status = out["status"]
    assert (status.raised, status.reserved_usd) == (0, 0.0)
    assert status.spent_usd == pytest.approx(out["total"])
    assert 0 < status.spent_usd <= 0.01


def test_a_guarded_call_dearer_than_the_budget_gets_advice_it_can_follow() -> None:
    """Each call costs more than a $0.0005/h budget: the first runs (its cost unknown), the
    next are refused saying what a guarded call can change — never "lower max_tokens"."""
    out = run_virtual(_guarded_under, gg.Budget(usd_per_hour=0.0005, on_exceed="raise"), 500, 3)
    errors = out["errors"]
    assert len(errors) == 2 and out["status"].raised == 2
    text = str(errors[0])
    assert "guarded call may cost" in text and "raise the budget" in text
    assert "@gate.guard(backend=...)" in text and "max_tokens" not in text
    assert "$0.0005/h" in text  # not "$0.00/h": a budget below a cent still reads as one


async def _a_hedge_refused_by_the_budget() -> dict[str, Any]:
    """Room for one call's reservation, not two: a slow call's hedge duplicate is refused
    while its first attempt still holds the room, and the call ends well on that attempt."""
    clock = LoopClock()

    async def slow(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep(1.0)
        return ok()

    script = Script(ok(), slow)
    price = SMALL_PRICE
    gate = gg.Gateway([mock_backend(script, name="b", price=price)], clock=clock,
                      budget=gg.Budget(usd_per_hour=0.0015, on_exceed="raise"))
    policy = gg.HedgePolicy(min_samples=1, quantile=0.5, budget_ratio=1.0)
    async with gate:
        await gate.chat(USER, max_tokens=100, hedge=policy, stream=False)  # fast: p50 to beat
        result = await gate.chat(USER, max_tokens=100, hedge=policy, stream=False)  # slow: hedged
        return {"result": result, "status": gate.budget_status(), "sent": len(script.requests)}


def test_raised_counts_the_calls_refused_not_a_hedges_duplicate() -> None:
    """A hedge's duplicate the budget has no room for is not sent, and the call goes on
    with its first attempt: no call raised. Before, ``raised`` counted it (101 for 100)."""
    out = run_virtual(_a_hedge_refused_by_the_budget)
    assert out["result"].text == "hi there" and out["sent"] == 2  # no duplicate sent
    assert out["status"].raised == 0
