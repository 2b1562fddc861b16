"""Tail hedging (gptgate/hedge.py, the race in gptgate/hedge_race.py): one duplicate past
the backend's p95 (of whole answers, or of first tokens for a visible stream), the loser
cancelled and billed, within a budget; never for shown text, tools (unless allowed) or a
private call onto a public backend. All on the virtual clock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import httpx2
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

import gptgate as gg
from gptgate.hedge import REPLACED_ALLOWANCE, HedgeBudget
from gptgate.telemetry import NAMES
from gptgate.testing import LoopClock, run_virtual
from tests.mockbackend import completion, sse

FAST = 1.0
STALL = 30.0
#: a policy that hedges from the first few samples and is not budget-bound (its median is
#: not moved by the one stalled latency a test adds)
EAGER = gg.HedgePolicy(min_samples=5, budget_ratio=1.0, quantile=0.5)


class Server:
    """Serves each request in FAST s, except the first request of each prompt named in
    ``stall`` (STALL s): a call stuck in one replica's queue."""

    def __init__(self, clock: LoopClock, stall: set[str] | None = None, everyone: bool = False):
        self.clock = clock
        self.stall = stall or set()
        self.everyone = everyone
        self.seen: set[str] = set()
        self.log: list[tuple[str, str]] = []

    def transport(self, name: str) -> httpx2.MockTransport:
        async def handler(request: httpx2.Request) -> httpx2.Response:
            body = json.loads(request.content)
            prompt = body["messages"][-1]["content"]
            self.log.append((name, prompt))
            first = prompt not in self.seen
            self.seen.add(prompt)
            slow = first and (self.everyone or prompt in self.stall)
            await self.clock.sleep(STALL if slow else FAST)
            if body.get("stream"):
                return httpx2.Response(
                    200, content=sse(["a", "b"]), headers={"content-type": "text/event-stream"}
                )
            return httpx2.Response(200, json=completion("answer " * 10))

        return httpx2.MockTransport(handler)

    def sent(self, prompt: str) -> list[str]:
        return [name for name, p in self.log if p == prompt]


def _gate(
    clock: LoopClock, server: Server | StreamServer, *names: str, concurrency: int = 8,
    max_connections: int | None = None, **options: Any,
) -> gg.Gateway:
    backends = [
        gg.Backend(
            name=name, base_url="http://127.0.0.1:9/v1", model="m", timeout=120.0,
            concurrency=concurrency, transport=server.transport(name),
            private=name.startswith("priv"), max_connections=max_connections,
        )
        for name in names
    ]
    return gg.Gateway(backends, clock=clock, seed=1, **options)


def _msg(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def _warm(gate: gg.Gateway, n: int = 10, **kwargs: Any) -> None:
    for i in range(n):
        await gate.chat(_msg(f"warm{i}"), **kwargs)


def _hedges(gate: gg.Gateway) -> dict[str, int]:
    return {name: s.hedges for name, s in gate.stats().items()}


def test_a_stalled_call_is_duplicated_to_another_backend_and_the_loser_cancelled_and_billed() -> (
    None
):
    async def main() -> None:
        clock = LoopClock()
        server = Server(clock, stall={"slow"})
        gate = _gate(clock, server, "a", "b")
        async with gate:
            await _warm(gate, 20)
            wasted_before = gate.ledger.total().wasted_tokens
            start = clock.now()
            result = await gate.chat(_msg("slow"), hedge=EAGER)
            took = clock.now() - start
            sent = [name for name, prompt in server.log if prompt == "slow"]
            assert len(sent) == 2 and sent[0] != sent[1]  # the duplicate went elsewhere
            assert result.backend == sent[1]
            assert took == pytest.approx(2 * FAST, abs=0.05)  # p95 (1 s), then 1 s
            assert _hedges(gate)[sent[1]] == 1 and _hedges(gate)[sent[0]] == 0
            # the cancelled loser's possibly-billed prompt and output are in the ledger
            assert gate.ledger.total().wasted_tokens > wasted_before
            assert result.billed_usage.total_tokens > result.usage.total_tokens
            await clock.sleep(STALL)  # the loser was cancelled: nothing arrives later
            assert len([1 for _, p in server.log if p == "slow"]) == 2

    run_virtual(main)


@pytest.mark.parametrize("stream", [None, False])
def test_with_one_backend_the_duplicate_goes_to_the_same_backend(stream: bool | None) -> None:
    """On the wire as SSE (a hedged call's default) or as JSON (the caller's choice)."""

    async def main() -> None:
        clock = LoopClock()
        server = Server(clock, stall={"slow"})
        gate = _gate(clock, server, "a")
        async with gate:
            await _warm(gate)
            result = await gate.chat(_msg("slow"), hedge=EAGER, stream=stream)
            assert [n for n, p in server.log if p == "slow"] == ["a", "a"]
            assert result.backend == "a" and _hedges(gate) == {"a": 1}
            assert result.streamed is (stream is None)

    run_virtual(main)


def test_a_call_faster_than_p95_and_a_call_without_hedge_are_never_duplicated() -> None:
    async def main() -> None:
        clock = LoopClock()
        server = Server(clock, stall={"slow"})
        gate = _gate(clock, server, "a", "b")
        async with gate:
            await _warm(gate)
            await gate.chat(_msg("quick"), hedge=EAGER)  # p95 is 1 s; the answer comes at 1 s
            await gate.chat(_msg("slow"))  # not opted in: waits the stall out
            assert len(server.log) == 12 and _hedges(gate) == {"a": 0, "b": 0}

    run_virtual(main)


def test_the_budget_is_never_exceeded() -> None:
    """200 fast hedge-enabled calls, then 100 whose first request stalls: hedges stay at 5%
    of the calls so far after every call, and as many again for duplicates that replaced a
    request that had shown nothing (HedgeBudget.replaced: here every one; 30 of 300 at the
    end), the rest wait it out."""

    async def main() -> None:
        clock = LoopClock()
        server = Server(clock)
        gate = _gate(clock, server, "a", "b")
        async with gate:
            policy = gg.HedgePolicy(min_samples=5, budget_ratio=0.05, window_s=1e6, quantile=0.5)
            await _warm(gate, 200, hedge=policy)
            assert sum(_hedges(gate).values()) == 0
            server.everyone = True
            for i in range(100):
                await gate.chat(_msg(f"q{i}"), hedge=policy)
                assert sum(_hedges(gate).values()) <= REPLACED_ALLOWANCE * 0.05 * (201 + i)
            assert sum(_hedges(gate).values()) == 29  # one short of 0.1 × 300: counted as spent

    run_virtual(main)


def test_a_call_that_found_the_budget_spent_is_hedged_when_room_comes_longest_waiter_first(
) -> None:
    """Two stalled calls, overtaken by calls sent after them, pass their threshold with no
    room left: they wait in line (not give up, as they used to). When a new call makes room
    for one hedge, it goes to the call that has waited longest since its send; the other waits
    until that duplicate has won (it replaced a request that showed nothing: its room comes
    back, HedgeBudget.replaced)."""

    async def main() -> None:
        clock = LoopClock()
        server = Server(clock, stall={"x", "y"})
        gate = _gate(clock, server, "a")
        policy = gg.HedgePolicy(min_samples=5, budget_ratio=0.1, window_s=1e6, quantile=0.5)
        async with gate:
            await _warm(gate, 5, hedge=policy)  # 5 calls: no room for a hedge yet
            took: dict[str, float] = {}

            async def call(text: str) -> None:
                start = clock.now()
                await gate.chat(_msg(text), hedge=policy)
                took[text] = clock.now() - start

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "x")  # the 6th call
                await clock.sleep(0.25)
                tg.start_soon(call, "y")  # the 7th
                await clock.sleep(0.25)
                for i in range(2):  # the 8th and 9th: answered at 1.5 s, overtaking both
                    tg.start_soon(call, f"z{i}")
                await clock.sleep(1.5)  # both past p50 (1 s) and overtaken, waiting for room
                assert _hedges(gate) == {"a": 0}
                tg.start_soon(call, "z2")  # the 10th call makes room for one hedge
            assert server.sent("x") == ["a", "a"] and server.sent("y") == ["a", "a"]
            assert _hedges(gate) == {"a": 2}
            assert took["x"] == pytest.approx(2.0 + FAST, abs=0.05)
            assert took["y"] == pytest.approx(2.0 + 2 * FAST - 0.25, abs=0.05)

    run_virtual(main)


def test_a_duplicate_never_sent_gives_its_room_back_to_the_budget() -> None:
    """Two stalled calls fill both permits: the one that gets the budget's only room has its
    duplicate wait for a permit until both answer, so it is never sent. That room was no
    duplicate: it goes back to the budget, and the next stalled call is hedged (it used to
    stay spent, and a job's last stragglers found the budget gone). The pool holds no
    connection past the two, so no permit is lent (gptgate/hedge_permit.py)."""

    async def main() -> None:
        clock = LoopClock()
        server = Server(clock, stall={"x", "w", "y"})
        gate = _gate(clock, server, "a", concurrency=2, max_connections=2)
        policy = gg.HedgePolicy(min_samples=5, budget_ratio=0.1, window_s=1e6, quantile=0.5)
        async with gate:
            await _warm(gate, 10, hedge=policy)
            async with anyio.create_task_group() as tg:  # 12 calls: room for one hedge
                tg.start_soon(lambda: gate.chat(_msg("x"), hedge=policy))
                tg.start_soon(lambda: gate.chat(_msg("w"), hedge=policy))
            assert server.sent("x") == ["a"] and server.sent("w") == ["a"]
            assert _hedges(gate) == {"a": 0}
            start = clock.now()
            await gate.chat(_msg("y"), hedge=policy)  # 13 calls: still room for one
            assert server.sent("y") == ["a", "a"] and _hedges(gate) == {"a": 1}
            assert clock.now() - start == pytest.approx(2 * FAST, abs=0.05)

    run_virtual(main)


def test_a_call_cancelled_while_its_duplicate_waits_for_a_permit_gives_the_room_back() -> None:
    async def main() -> None:
        clock = LoopClock()
        server = Server(clock, stall={"x"})
        gate = _gate(clock, server, "a", concurrency=1, max_connections=1)  # none to lend
        policy = gg.HedgePolicy(min_samples=5, budget_ratio=0.1, window_s=1e6, quantile=0.5)
        async with gate:
            await _warm(gate, 10, hedge=policy)
            with anyio.move_on_after(3.0):  # past p50 (1 s): its duplicate waits for the permit
                await gate.chat(_msg("x"), hedge=policy)
            assert gate._runner is not None
            budget = gate._runner.hedge_budgets[(0.1, 1e6)]
            assert budget.spent == 0 and server.sent("x") == ["a"]

    run_virtual(main)


def test_the_budget_line_serves_the_longest_waiter_and_forgets_a_cancelled_one() -> None:
    async def main() -> None:
        budget = HedgeBudget(0.5, window_s=100.0)
        budget.record_call(0.0)  # room for none
        async with anyio.create_task_group() as tg:
            tg.start_soon(budget.wait_turn, 0.0)
            await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()  # answered while waiting: leaves the line
        budget.record_call(1.0)  # room for one, nobody waiting: nothing spent
        assert budget.spent == 0
        served: list[float] = []

        async def wait(sent_at: float) -> None:
            await budget.wait_turn(sent_at)
            served.append(sent_at)

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait, 0.5)  # in line first, but sent later
            tg.start_soon(wait, 0.2)
            await anyio.lowlevel.checkpoint()
            assert budget.try_spend(2.0) and budget.spent == 1  # the only room is gone
            budget.record_call(3.0)
            budget.record_call(4.0)  # room for one more: the longest waiter's
            await anyio.lowlevel.checkpoint()
            assert served == [0.2] and budget.spent == 2
            tg.cancel_scope.cancel()
        budget.record_call(5.0)
        budget.record_call(6.0)  # the cancelled waiter is gone: the room stays unspent
        assert budget.spent == 2

    run_virtual(main)


def test_budget_counts_hedges_against_calls_in_the_window() -> None:
    budget = HedgeBudget(0.1, window_s=10.0)
    for t in range(10):
        budget.record_call(float(t))
    assert budget.try_spend(9.0) and not budget.try_spend(9.0)
    for t in range(10, 20):
        budget.record_call(float(t))
    # at t=19.5 the window holds calls 10..19 and no hedge (the one at 9 s aged out)
    assert budget.try_spend(19.5) and not budget.try_spend(19.5)


def test_a_private_call_is_hedged_only_onto_a_private_backend() -> None:
    async def main() -> None:
        clock = LoopClock()
        server = Server(clock, stall={"slow"})
        gate = _gate(clock, server, "priv", "pub")
        async with gate:
            await _warm(gate, 10, private=True)
            result = await gate.chat(_msg("slow"), private=True, hedge=EAGER)
            assert [n for n, p in server.log if p == "slow"] == ["priv", "priv"]
            assert result.backend == "priv" and _hedges(gate) == {"priv": 1, "pub": 0}

    run_virtual(main)


TOOLS = [{"type": "function", "function": {"name": "pay", "parameters": {"type": "object"}}}]


def test_a_call_with_tools_is_hedged_only_when_the_policy_allows_it() -> None:
    async def main() -> None:
        clock = LoopClock()
        server = Server(clock, stall={"slow", "slow2"})
        gate = _gate(clock, server, "a")
        async with gate:
            await _warm(gate)
            await gate.chat(_msg("slow"), hedge=EAGER, tools=TOOLS)
            assert len([1 for _, p in server.log if p == "slow"]) == 1
            allowed = EAGER.model_copy(update={"tools": True})
            await gate.chat(_msg("slow2"), hedge=allowed, tools=TOOLS)
            assert len([1 for _, p in server.log if p == "slow2"]) == 2

    run_virtual(main)


def test_a_scenario_hedges_its_calls_and_a_call_may_opt_out() -> None:
    async def main() -> None:
        clock = LoopClock()
        server = Server(clock, stall={"slow", "slow2"})
        gate = _gate(clock, server, "a")
        scenario = gg.Scenario(name="job", hedge=EAGER)
        async with gate:
            await _warm(gate)
            await gate.chat(_msg("slow"), scenario=scenario, hedge=False)
            assert _hedges(gate) == {"a": 0}
            await gate.chat(_msg("slow2"), scenario=scenario)
            assert _hedges(gate) == {"a": 1}

    run_virtual(main)


def test_bad_hedge_arguments_are_refused_naming_the_argument() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate = _gate(clock, Server(clock), "a")
        async with gate:
            with pytest.raises(gg.BadRequestError, match="hedge"):
                await gate.chat(_msg("x"), hedge="yes")

    run_virtual(main)
    with pytest.raises(ValidationError, match="budget_ratio"):
        gg.HedgePolicy(budget_ratio=0)
    with pytest.raises(ValidationError, match="hedge"):
        gg.Scenario(hedge="often")


def test_the_duplicate_attempt_span_says_hedge_and_shares_the_call_span() -> None:
    async def main() -> None:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        clock = LoopClock()
        server = Server(clock, stall={"slow"})
        gate = _gate(clock, server, "a", tracer_provider=provider)
        async with gate:
            await _warm(gate)
            exporter.clear()
            await gate.chat(_msg("slow"), hedge=EAGER)
        spans = exporter.get_finished_spans()
        attempts = [s for s in spans if s.kind == SpanKind.CLIENT]
        calls = [s for s in spans if s.kind == SpanKind.INTERNAL]
        assert len(attempts) == 2 and len(calls) == 1
        flags = [dict(s.attributes or {}).get(NAMES["hedge"]) for s in attempts]
        assert sorted(flags, key=str) == [None, True]
        assert all(s.parent is not None and s.parent.span_id == calls[0].context.span_id
                   for s in attempts)

    run_virtual(main)


# -- visible streams: hedged on time to first token, only until a token is shown ------------

GAP = 0.5
#: a stall before the first token, and one after it (a slow decode): both within the idle
#: timeout between chunks (30 s), which would otherwise retry the stream
FIRST_STALL = 20.0
DECODE_STALL = 10.0
#: a first token past the p95 but before a duplicate's, on a request slow throughout
LATE = 1.6


class _Body(httpx2.AsyncByteStream):
    """An SSE answer whose first token comes ``first_s`` after the headers, then one token
    every ``gap_s``; each token names the backend and request that produced it."""

    def __init__(self, clock: LoopClock, tag: str, first_s: float, gap_s: float) -> None:
        self.clock, self.tag, self.first_s, self.gap_s = clock, tag, first_s, gap_s
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield _chunk({"role": "assistant"})
        await self.clock.sleep(self.first_s)
        for i in range(3):
            if i:
                await self.clock.sleep(self.gap_s)
            yield _chunk({"content": f"{self.tag}.{i} "}, finish=i == 2)
        usage = {"prompt_tokens": 10, "completion_tokens": 3}
        yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode()

    async def aclose(self) -> None:
        self.closed = True


def _chunk(delta: dict[str, str], finish: bool = False) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": "stop" if finish else None}
    return f"data: {json.dumps({'id': 'c', 'model': 'm', 'choices': [choice]})}\n\n".encode()


class StreamServer:
    """Streams every answer: first token FAST after the request, except the first request of
    each prompt in ``stall`` (every request of a prompt in ``stuck``), whose first token takes
    FIRST_STALL; ``mid_stall`` stalls (DECODE_STALL) after the first token instead. The first
    request of a prompt in ``late`` is slow throughout (a bad replica or batch): its first
    token after LATE, then DECODE_STALL between tokens."""

    def __init__(self, clock: LoopClock, stall: set[str] | None = None) -> None:
        self.clock = clock
        self.stall = stall or set()
        self.stuck: set[str] = set()
        self.mid_stall: set[str] = set()
        self.late: set[str] = set()
        self.everyone = False
        self.seen: set[str] = set()
        self.log: list[tuple[str, str]] = []
        self.bodies: list[_Body] = []

    def transport(self, name: str) -> httpx2.MockTransport:
        async def handler(request: httpx2.Request) -> httpx2.Response:
            prompt = json.loads(request.content)["messages"][-1]["content"]
            self.log.append((name, prompt))
            first = prompt not in self.seen
            self.seen.add(prompt)
            slow = prompt in self.stuck or (first and (self.everyone or prompt in self.stall))
            gap = DECODE_STALL if prompt in self.mid_stall else GAP
            first_s = FIRST_STALL if slow else FAST
            if first and prompt in self.late:
                first_s, gap = LATE, DECODE_STALL
            body = _Body(self.clock, f"{name}{len(self.log)}", first_s, gap)
            self.bodies.append(body)
            return httpx2.Response(
                200, stream=body, headers={"content-type": "text/event-stream"}
            )

        return httpx2.MockTransport(handler)

    def sent(self, prompt: str) -> list[str]:
        return [name for name, p in self.log if p == prompt]


async def _read(gate: gg.Gateway, text: str, **kwargs: Any) -> tuple[list[str], gg.ChatResult]:
    async with gate.stream(_msg(text), **kwargs) as stream:
        deltas = [delta async for delta in stream]
    return deltas, stream.result


async def _warm_streams(gate: gg.Gateway, n: int = 10, **kwargs: Any) -> None:
    """Streamed answers: the backends' time-to-first-token windows fill (FAST each)."""
    for i in range(n):
        await _read(gate, f"warm{i}", **kwargs)


def test_a_stream_stalled_before_its_first_token_is_duplicated_and_the_caller_reads_the_duplicate(
) -> None:
    async def main() -> None:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        clock = LoopClock()
        server = StreamServer(clock, stall={"slow"})
        gate = _gate(clock, server, "a", "b", tracer_provider=provider)
        async with gate:
            await _warm_streams(gate)
            wasted_before = gate.ledger.total().wasted_tokens
            exporter.clear()
            start = clock.now()
            deltas, result = await _read(gate, "slow", hedge=EAGER)
            took = clock.now() - start
            sent = server.sent("slow")
            assert len(sent) == 2 and sent[0] != sent[1]  # the duplicate went elsewhere
            # p50 TTFT (1 s), then the duplicate's own: 1 s, then two gaps
            assert took == pytest.approx(2 * FAST + 2 * GAP, abs=0.05)
            tag = f"{sent[1]}{len(server.log)}"
            assert deltas == [f"{tag}.0 ", f"{tag}.1 ", f"{tag}.2 "]  # the duplicate's tokens
            assert result.backend == sent[1] and result.text == "".join(deltas)
            assert _hedges(gate) == {sent[0]: 0, sent[1]: 1}
            # the loser was cancelled when the duplicate's first token came, and billed
            loser = server.bodies[-2]
            assert loser.closed
            assert gate.ledger.total().wasted_tokens > wasted_before
            assert result.billed_usage.total_tokens > result.usage.total_tokens
            await clock.sleep(STALL)
            assert len(server.sent("slow")) == 2
        attempts = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
        flags = [dict(s.attributes or {}).get(NAMES["hedge"]) for s in attempts]
        assert sorted(flags, key=str) == [None, True]

    run_virtual(main)


def test_a_stream_that_has_shown_a_token_is_never_hedged() -> None:
    """The first token came in time, then the decode stalls: the caller has seen text, a
    duplicate could show it twice — the stream is waited out, whatever the policy."""

    async def main() -> None:
        clock = LoopClock()
        server = StreamServer(clock)
        gate = _gate(clock, server, "a", "b")
        async with gate:
            await _warm_streams(gate)
            server.mid_stall = {"s"}
            start = clock.now()
            deltas, result = await _read(gate, "s", hedge=EAGER)
            assert clock.now() - start == pytest.approx(FAST + 2 * DECODE_STALL, abs=0.05)
            assert len(server.sent("s")) == 1 and len(deltas) == 3
            assert result.billed_usage == result.usage
            assert _hedges(gate) == {"a": 0, "b": 0}

    run_virtual(main)


def test_a_scenario_hedges_its_streams_and_a_stream_may_opt_out() -> None:
    async def main() -> None:
        clock = LoopClock()
        server = StreamServer(clock, stall={"s1", "s2"})
        gate = _gate(clock, server, "a")
        job = gg.Scenario(name="job", hedge=EAGER)
        async with gate:
            await _warm_streams(gate)
            await _read(gate, "s1", scenario=job, hedge=False)
            assert server.sent("s1") == ["a"] and _hedges(gate) == {"a": 0}
            deltas, _ = await _read(gate, "s2", scenario=job)
            assert server.sent("s2") == ["a", "a"]  # one backend: the same one
            assert deltas[0].startswith(f"a{len(server.log)}.") and _hedges(gate) == {"a": 1}

    run_virtual(main)


def test_stream_hedges_never_exceed_the_budget() -> None:
    """100 fast hedge-enabled streams, then 60 whose first token stalls: hedges stay at 5% of
    the streams so far after every one, and as many again for duplicates that replaced a
    request that had shown nothing (16 of 160 at the end); the rest wait it out."""

    async def main() -> None:
        clock = LoopClock()
        server = StreamServer(clock)
        gate = _gate(clock, server, "a")
        async with gate:
            policy = gg.HedgePolicy(min_samples=5, budget_ratio=0.05, window_s=1e6, quantile=0.5)
            await _warm_streams(gate, 100, hedge=policy)
            assert sum(_hedges(gate).values()) == 0
            server.everyone = True
            for i in range(60):
                await _read(gate, f"q{i}", hedge=policy)
                assert sum(_hedges(gate).values()) <= REPLACED_ALLOWANCE * 0.05 * (101 + i)
            assert sum(_hedges(gate).values()) == 16  # floor(2 × 0.05 × 160)

    run_virtual(main)


def test_a_private_stream_is_hedged_only_onto_a_private_backend() -> None:
    async def main() -> None:
        clock = LoopClock()
        server = StreamServer(clock, stall={"slow"})
        gate = _gate(clock, server, "priv", "pub")
        async with gate:
            await _warm_streams(gate, private=True)
            _, result = await _read(gate, "slow", private=True, hedge=EAGER)
            assert server.sent("slow") == ["priv", "priv"]
            assert result.backend == "priv" and _hedges(gate) == {"priv": 1, "pub": 0}

    run_virtual(main)


@pytest.mark.parametrize("how", ["cancel", "close"])
def test_a_stream_left_mid_race_cancels_both_racers_and_holds_nothing(how: str) -> None:
    """Both racers are waiting for their first token when the caller's scope is cancelled,
    or the gateway closes (no grace): both requests are cancelled, billed as possibly
    billed, and every permit and connection is back."""

    async def main() -> None:
        clock = LoopClock()
        server = StreamServer(clock)
        gate = _gate(clock, server, "a", "b", shutdown_grace_s=0.0)
        entries_before = 0
        errors: list[BaseException] = []

        scope = anyio.CancelScope()

        async def caller() -> None:
            with scope:
                try:
                    await _read(gate, "slow", hedge=EAGER)
                except gg.GatewayClosedError as error:
                    errors.append(error)

        async with anyio.create_task_group() as tg:
            async with gate:
                await _warm_streams(gate)
                entries_before = sum(e.attempts for e in gate.ledger.entries.values())
                server.stuck = {"slow"}
                tg.start_soon(caller)
                await clock.sleep(FAST + 0.5)  # past p50 TTFT: the duplicate is out
                assert len(server.sent("slow")) == 2
                if how == "cancel":
                    scope.cancel()
                    await clock.sleep(0.1)
                # leaving closes the gateway: with no grace, the stream is cancelled
            stats = gate.stats()
        assert all(body.closed for body in server.bodies)
        assert errors if how == "close" else not errors
        for name in ("a", "b"):
            assert (stats[name].in_flight, stats[name].queued) == (0, 0)
            assert stats[name].pool.checked_out == 0
        # both sent attempts are in the ledger as possibly billed; the duplicate is counted
        assert sum(e.attempts for e in gate.ledger.entries.values()) == entries_before + 2
        assert sum(_hedges(gate).values()) == 1
        await clock.sleep(STALL)
        assert len(server.sent("slow")) == 2

    run_virtual(main)


def test_a_hedged_chat_streams_on_the_wire_and_is_raced_to_its_first_token() -> None:
    """A hidden call is hedged like a stream: past its backend's p95 time to first token (1 s
    here, its whole answer takes 2 s), and the loser is cancelled at the duplicate's first
    token — before its own: what it cost is an estimate, counted as uncertain."""

    async def main() -> None:
        clock = LoopClock()
        server = StreamServer(clock, stall={"slow"})
        gate = _gate(clock, server, "a", "b")
        async with gate:
            await _warm_streams(gate)
            uncertain_before = gate.ledger.total().uncertain_tokens
            start = clock.now()
            result = await gate.chat(_msg("slow"), hedge=EAGER, max_tokens=50)
            assert clock.now() - start == pytest.approx(2 * FAST + 2 * GAP, abs=0.05)
            sent = server.sent("slow")
            assert len(sent) == 2 and result.backend == sent[1]
            assert (result.streamed, result.stream_decision) == (True, "hedge")
            assert server.bodies[-2].closed  # the loser, cut before its first token
            assert gate.ledger.total().uncertain_tokens > uncertain_before
            assert result.billed_usage.total_tokens > result.usage.total_tokens

    run_virtual(main)


def test_a_hidden_call_keeps_the_racer_quicker_from_its_own_send_not_the_first_token_in() -> (
    None
):
    """The first request's token comes late (1.6 s, past the 1 s p95) and its decode is as
    slow; the duplicate, sent at 1 s, has its token at 2 s: 1 s from its send. A hidden call
    keeps the duplicate (it used to keep the first token in, and finish at 21.6 s); a
    visible stream has shown the first token and reads the slow request to its end."""

    async def main() -> None:
        clock = LoopClock()
        server = StreamServer(clock)
        server.late = {"hidden", "shown"}
        gate = _gate(clock, server, "a")
        async with gate:
            await _warm_streams(gate)
            start = clock.now()
            result = await gate.chat(_msg("hidden"), hedge=EAGER, max_tokens=50)
            assert clock.now() - start == pytest.approx(2 * FAST + 2 * GAP, abs=0.05)
            assert server.sent("hidden") == ["a", "a"] and result.text.startswith("a12.")
            assert server.bodies[-2].closed  # the slow first request, cut
            assert result.billed_usage.total_tokens > result.usage.total_tokens
            start = clock.now()
            deltas, _ = await _read(gate, "shown", hedge=EAGER)
            assert clock.now() - start == pytest.approx(LATE + 2 * DECODE_STALL, abs=0.05)
            assert deltas[0].startswith("a13.") and len(server.sent("shown")) == 2

    run_virtual(main)
