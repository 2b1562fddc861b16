"""A request we hung up on still runs at the backend until the backend notices the disconnect.

Its concurrency slot stays taken for the backend's ``abandon_grace_s``: handed on at once, the
next call reaches the backend while the old request still runs — one over the limit (found in
``benchmarks/fleet.py``: a false timeout at a fixed fleet limit of 32 put 33 on the server;
on a server with a hard cap that is a 503). Virtual time: every timing below is exact.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import anyio
import anyio.abc
import pytest

import gptgate as gg
from gptgate.limits import FixedLimit, Limiter
from gptgate.sim.ledger import LedgerSnapshot
from gptgate.testing import LoopClock, run_virtual, sim_backend
from tests.fleettools import namespace
from tests.lateserver import LateNoticingServer, finishing, long_answer
from tests.lateserver import late_backend as _backend
from tests.mockbackend import USER, gateway, wait_until


@pytest.mark.parametrize(("grace_s", "peak"), [(0.0, 2), (0.1, 1)])
def test_a_timed_out_request_keeps_its_slot_while_the_backend_may_still_run_it(
    grace_s: float, peak: int
) -> None:
    """Two calls on a limit of 1: the first times out after 1 s. With no grace (the old
    behaviour) the waiting call is sent at once, beside the request the server still runs."""

    async def main() -> None:
        clock = LoopClock()
        async with anyio.create_task_group() as server_tasks:
            server = LateNoticingServer(server_tasks, notice_s=0.05)
            async with gateway(_backend(server, abandon_grace_s=grace_s), clock=clock) as gate:
                async with anyio.create_task_group() as tg:
                    for _ in range(2):
                        tg.start_soon(gate.chat, USER)
                    await clock.sleep(1.01)
                    limiter = gate._states["mock"].limiter
                    # the timed-out request's slot is still taken, within its grace
                    assert limiter.statistics().holding == (1 if grace_s else 0)
                stats = gate.stats()["mock"]
            assert stats.timeouts == 1 and stats.failures == 1
            assert server.requests == 3  # the timed-out try, its retry, the other call
            assert server.peak == peak
            assert limiter.in_flight == 0 and limiter.statistics().holding == 0

    run_virtual(main)


def test_a_cancelled_call_keeps_its_slot_for_the_grace_then_hands_it_on() -> None:
    async def main() -> None:
        clock = LoopClock()
        async with anyio.create_task_group() as server_tasks:
            server = LateNoticingServer(server_tasks, notice_s=0.05)
            async with gateway(_backend(server), clock=clock) as gate:
                sent_at: list[float] = []

                async def second() -> None:
                    await gate.chat(USER)
                    sent_at.append(clock.now())

                async with anyio.create_task_group() as tg:
                    with anyio.move_on_after(0.3):  # the caller gives up on the hung call
                        await gate.chat(USER)
                    tg.start_soon(second)
            assert server.peak == 1
            # sent 0.1 s after the cancel (the grace), answered 0.5 s later
            assert sent_at == [pytest.approx(0.9, abs=1e-6)]

    run_virtual(main)


def test_an_abandoned_permit_feeds_no_sample_and_frees_its_slot_after_the_grace() -> None:
    """The limiter alone: the sample goes to the limit at once (a timeout is a loss now), the
    slot and the shared layer's token come back only when the grace is over."""

    class Recording:
        def __init__(self) -> None:
            self.left: list[float] = []

        async def enter(self, deadline: float | None) -> object:
            return "token"

        def leave(self, token: object, /) -> None:
            self.left.append(clock.now())

    later: list[tuple[float, Any]] = []
    clock = LoopClock()
    admission = Recording()
    limiter = Limiter(
        FixedLimit(2), clock=clock, abandon_grace_s=0.25, admission=admission,
        defer=lambda seconds, then: later.append((seconds, then)),
    )

    async def main() -> None:
        timed_out = await limiter.acquire()
        cancelled = await limiter.acquire()
        timed_out.dropped(1.0, abandoned=True)
        cancelled.abandon()
        stats = limiter.statistics()
        assert (stats.in_flight, stats.holding, stats.dropped, stats.ignored) == (2, 2, 1, 1)
        assert admission.left == [] and [s for s, _ in later] == [0.25, 0.25]
        for _, then in later:
            then()
        assert limiter.in_flight == 0 and limiter.statistics().holding == 0
        assert len(admission.left) == 2
        # without a way to defer, nothing is held
        plain = Limiter(FixedLimit(1), clock=clock, abandon_grace_s=0.25)
        permit = await plain.acquire()
        permit.abandon()
        assert plain.in_flight == 0

    run_virtual(main)


async def test_with_shared_the_fleet_permit_is_held_for_the_grace_too(redis_url: str) -> None:
    """Two gateways on one fleet-wide limit of 1, a real redis-server: the second process's
    call gets the permit only after the first process's timed-out request's grace — by then
    the server (which notices 0.1 s after the hang-up) has let go of it. Ordering, not timing:
    the server's notice and the grace are timers on one event loop, 0.1 s < 0.3 s."""
    async with anyio.create_task_group() as server_tasks:
        server = LateNoticingServer(server_tasks, notice_s=0.1, answer_s=0.01)
        shared = gg.Shared(redis_url, namespace=namespace(), lease_s=5.0, op_budget_s=1.0)
        gates = [
            gateway(_backend(server, abandon_grace_s=0.3, timeout=0.2), shared=shared,
                    max_attempts=1)
            for _ in range(2)
        ]
        for gate in gates:
            gate._fleet_options = {"poll_s": 0.002}
        async with gates[0], gates[1]:
            outcomes: list[str] = []

            async def call(gate: gg.Gateway) -> None:
                try:
                    await gate.chat(USER)
                    outcomes.append("ok")
                except gg.RequestTimeout:
                    outcomes.append("timeout")

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, gates[0])
                await wait_until(lambda: server.requests == 1)
                tg.start_soon(call, gates[1])
            held = [g.stats()["mock"].fleet for g in gates]
    assert sorted(outcomes) == ["ok", "timeout"]
    assert server.requests == 2 and server.peak == 1
    assert all(s is not None and s.held == 0 for s in held)


@pytest.mark.parametrize(("answers", "peak", "second_sent"), [("stop", 2, 1.1), ("finish", 1, 3.0)])
def test_a_server_that_finishes_abandoned_answers_keeps_the_slot_until_the_answer_ends(
    answers: str, peak: int, second_sent: float
) -> None:
    """Limit 1; the first call's deadline (1 s) cuts its 3 s answer, which the server still
    generates. Hung up on ("stop"), its slot went to the second call after the 0.1 s grace,
    beside the answer still running; with ``abandoned_answers="finish"`` the answer is read to
    its end in the background and the second call is sent when it has ended."""

    async def main() -> None:
        clock = LoopClock()
        async with anyio.create_task_group() as server_tasks:
            server, backend = finishing(server_tasks, answers)
            async with gateway(backend, clock=clock) as gate:
                outcomes: list[str] = []

                async def call(timeout: float) -> None:
                    try:
                        await gate.chat(USER, timeout=timeout)
                        outcomes.append("ok")
                    except gg.RequestTimeout as error:
                        assert error.deadline
                        outcomes.append("cut")

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call, 1.0)
                    await clock.sleep(0.01)
                    tg.start_soon(call, 20.0)
                    await clock.sleep(1.05)
                    assert gate.stats()["mock"].abandoned_holding == 1
                stats = gate.stats()["mock"]
            assert outcomes == ["cut", "ok"]
            assert server.peak == peak
            assert server.sent_at[1] - server.sent_at[0] == pytest.approx(second_sent, abs=0.02)
            assert (stats.in_flight, stats.abandoned_holding, stats.pool.checked_out) == (0, 0, 0)

    run_virtual(main)


def test_closing_the_gateway_ends_an_answer_read_in_the_background_at_once() -> None:
    async def main() -> None:
        clock = LoopClock()
        async with anyio.create_task_group() as server_tasks:
            server = LateNoticingServer(server_tasks, notice_s=None, first_s=30.0)
            backend = _backend(server, timeout=60.0, abandoned_answers="finish")
            gate = gateway(backend, clock=clock)
            async with gate:
                with anyio.move_on_after(0.5):  # the caller gives up; the answer runs on
                    await gate.chat(USER)
                assert gate.stats()["mock"].abandoned_holding == 1
                closing = clock.now()
            assert clock.now() - closing < 0.1  # not the answer's 29.5 s
            stats = gate.stats()["mock"]
            assert (stats.in_flight, stats.abandoned_holding) == (0, 0)
            server_tasks.cancel_scope.cancel()

    run_virtual(main)


@pytest.mark.parametrize("answers", ["stop", "finish"])
def test_an_abandoned_answer_read_to_its_end_is_booked_at_its_real_usage(answers: str) -> None:
    """The attempt cut by its deadline is booked at once as an estimate (the prompt, and what
    1 s of generation made); with ``"finish"`` the answer still arrives, 2,000 tokens long,
    and the booking becomes its real usage — what a hosted API bills for it."""

    async def main() -> None:
        clock = LoopClock()
        async with anyio.create_task_group() as server_tasks:
            _, backend = long_answer(server_tasks, answers)
            async with gateway(backend, clock=clock) as gate:
                with pytest.raises(gg.RequestTimeout):
                    await gate.chat(USER, timeout=1.0)
                booked = dataclasses.replace(gate.ledger.entries["mock"])
                await clock.sleep(2.5)  # the answer has ended at the server
                entry = gate.ledger.entries["mock"]
            assert booked.attempts == 1 and booked.estimated_attempts == 1
            assert booked.output_tokens < 2000
            if answers == "finish":
                assert (entry.input_tokens, entry.output_tokens) == (10, 2000)
                assert entry.wasted_tokens == 2010 and entry.uncertain_tokens == 0
                assert entry.estimated_attempts == 0 and entry.attempts == 1
                real = (10 * 1.0 + 2000 * 10.0) / 1e6
                assert entry.cost_usd == entry.wasted_cost_usd == pytest.approx(real)
                assert booked.cost_usd < real
            else:  # hung up on: the estimate is all we know
                assert entry == booked

    run_virtual(main)


def test_a_cancelled_call_whose_answer_is_read_to_its_end_is_booked_at_its_real_usage() -> None:
    async def main() -> None:
        clock = LoopClock()
        async with anyio.create_task_group() as server_tasks:
            _, backend = long_answer(server_tasks, "finish")
            async with gateway(backend, clock=clock) as gate:
                with anyio.move_on_after(1.0):  # the caller gives up
                    await gate.chat(USER)
                assert gate.ledger.entries["mock"].estimated_attempts == 1
                await clock.sleep(2.5)
                entry = gate.ledger.entries["mock"]
            assert (entry.output_tokens, entry.uncertain_tokens, entry.attempts) == (2000, 0, 1)

    run_virtual(main)


def test_the_llamacpp_simulator_finishes_abandoned_answers_like_llama_server() -> None:
    """The simulator's llamacpp profile generates a non-streamed answer to its end when its
    client hangs up, as llama-server does (measured, docs/guide/deadlines.md), and bills all
    of it. On it, with a limit of 1: a call cut by its deadline, then another. Hung up on
    (``"stop"``), both ran at once; with ``abandoned_answers="finish"`` one after the other,
    and the server billed the same tokens either way."""

    async def run(answers: str) -> LedgerSnapshot:
        clock = LoopClock()
        backend, engine = sim_backend(
            "llamacpp", name="l", clock=clock, concurrency=1, timeout=600.0,
            abandoned_answers=answers,
        )
        async with gateway(backend, clock=clock) as gate:
            async with anyio.create_task_group() as tg:

                async def cut() -> None:
                    with pytest.raises(gg.RequestTimeout):
                        await gate.chat(USER, max_tokens=4000, stream=False, timeout=0.5)

                tg.start_soon(cut)
                await clock.sleep(0.01)
                tg.start_soon(functools.partial(gate.chat, USER, max_tokens=20))
            await clock.sleep(120.0)  # the abandoned answer has ended at the server
            assert gate.stats()["l"].in_flight == 0
            return engine.ledger.snapshot()

    hung_up, read_on = run_virtual(run, "stop"), run_virtual(run, "finish")
    assert (hung_up.peak_in_flight, read_on.peak_in_flight) == (2, 1)
    assert (hung_up.abandoned, hung_up.ok) == (1, 1)  # generated on after the hang-up
    assert (read_on.abandoned, read_on.ok) == (0, 2)  # delivered: we kept reading
    assert hung_up.output_tokens == read_on.output_tokens  # billed whole either way
    assert hung_up.wasted_output_tokens > 0


async def test_with_shared_an_answer_read_to_its_end_keeps_the_fleet_permit_till_then(
    redis_url: str,
) -> None:
    """Two gateways on a fleet-wide limit of 1, a server that finishes abandoned answers, and
    ``abandoned_answers="finish"``: the first process's call is cut by its deadline, and the
    second process's call is sent only once that answer has ended there. Ordering, not
    timing: the fleet permit is freed by the answer's own arrival."""
    async with anyio.create_task_group() as server_tasks:
        server = LateNoticingServer(server_tasks, notice_s=None, first_s=0.3, answer_s=0.01)
        shared = gg.Shared(redis_url, namespace=namespace(), lease_s=5.0, op_budget_s=1.0)
        gates = [
            gateway(_backend(server, timeout=10.0, abandoned_answers="finish"), shared=shared,
                    max_attempts=1)
            for _ in range(2)
        ]
        for gate in gates:
            gate._fleet_options = {"poll_s": 0.002}
        async with gates[0], gates[1]:
            with pytest.raises(gg.RequestTimeout):
                await gates[0].chat(USER, timeout=0.1)
            await gates[1].chat(USER)
            held = [g.stats()["mock"].fleet for g in gates]
    assert server.requests == 2 and server.peak == 1
    assert server.sent_at[1] - server.sent_at[0] >= 0.3
    assert all(s is not None and s.held == 0 for s in held)
