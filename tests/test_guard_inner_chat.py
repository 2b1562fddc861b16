"""``gate.chat`` / ``gate.stream`` / ``gate.map`` awaited inside a ``@gate.guard``-ed function
run under the guard's permit on its backend (gptgate/guard_inner.py).

Before, each took a permit of its own: on the guard's backend at ``concurrency=1`` the inner
call waited for the permit its own guard held — the queue's stall bound (196 s here), then
``OverloadedError`` (a body migrated from the SDK to ``gate.chat`` under its guard
deadlocked). Now an inner attempt on the guard's backend takes the guard's seat (one request
at a time under the guard's permit, as an SDK request of the body does) or a permit of its
own, whichever comes first: never a wait on itself, never past the limit — counted here as
the most requests the server ever held at once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx2
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import gptgate as gg
from gptgate.sim import FaultPlan
from gptgate.testing import LoopClock, run_virtual, sim_backend
from tests.mockbackend import completion, sse

ASK = [{"role": "user", "content": "inner"}]


async def _inner(kind: str) -> dict[str, Any]:
    clock = LoopClock()
    backend, engine = sim_backend("gpu", name="a", clock=clock, seed=1, concurrency=1)
    gate = gg.Gateway([backend], clock=clock, seed=3)

    @gate.guard(backend="a")
    async def outer() -> object:
        if kind == "chat":
            return (await gate.chat(ASK, max_tokens=5)).text
        if kind == "stream":
            async with gate.stream(ASK, max_tokens=5) as stream:
                return "".join([piece async for piece in stream])
        return [r.text for r in await gate.map([{"messages": ASK, "max_tokens": 5}] * 4)]

    async with gate:
        start = clock.now()
        try:
            outcome: object = await outer()
        except gg.GateError as error:
            outcome = error
        stats = gate.stats()["a"]
        return {
            "took": clock.now() - start, "outcome": outcome,
            "peak": engine.ledger.snapshot().peak_in_flight,
            "requests": engine.ledger.snapshot().requests,
            "left": (stats.in_flight, stats.queued),
        }


def test_the_gateways_own_calls_inside_a_guard_on_a_limit_of_one_run_under_its_permit() -> None:
    for kind in ("chat", "stream", "map"):
        out = run_virtual(_inner, kind)
        # answered under the guard's permit, not after the 196 s stall bound
        assert out["took"] < 10.0, (kind, out)
        assert not isinstance(out["outcome"], gg.GateError), (kind, out)
        if kind == "map":  # four inner calls share the one permit: one at a time
            assert isinstance(out["outcome"], list) and len(out["outcome"]) == 4
            assert all(out["outcome"]), out
            assert out["requests"] == 4
        else:
            assert isinstance(out["outcome"], str) and out["outcome"], (kind, out)
            assert out["requests"] == 1
        assert out["peak"] == 1, (kind, out)  # never past the limit of one
        assert out["left"] == (0, 0), (kind, out)


class Server:
    """Answers each request in ``FAST`` s (the first of a prompt in ``stall``: ``STALL`` s),
    counting the most requests it ever held at once."""

    FAST, STALL = 1.0, 60.0

    def __init__(self, clock: LoopClock, stall: frozenset[str] = frozenset()) -> None:
        self.clock, self.stall = clock, stall
        self.seen: set[str] = set()
        self.log: list[tuple[str, str]] = []
        self.now: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    def transport(self, name: str) -> httpx2.MockTransport:
        async def handler(request: httpx2.Request) -> httpx2.Response:
            body = json.loads(request.content)
            prompt = body["messages"][-1]["content"]
            self.log.append((name, prompt))
            slow = prompt in self.stall and prompt not in self.seen
            self.seen.add(prompt)
            self.now[name] = self.now.get(name, 0) + 1
            self.peak[name] = max(self.peak.get(name, 0), self.now[name])
            try:
                await self.clock.sleep(self.STALL if slow else self.FAST)
            finally:
                self.now[name] -= 1
            if body.get("stream"):
                return httpx2.Response(
                    200, content=sse(["a", "b"]), headers={"content-type": "text/event-stream"}
                )
            return httpx2.Response(200, json=completion("answer"))

        return httpx2.MockTransport(handler)


def _gate(
    clock: LoopClock, server: Server, *names: str, concurrency: int = 1, **options: Any
) -> gg.Gateway:
    backends = [
        gg.Backend(
            name=name, base_url="http://127.0.0.1:9/v1", model="m", timeout=120.0,
            concurrency=concurrency, transport=server.transport(name),
        )
        for name in names
    ]
    return gg.Gateway(backends, clock=clock, seed=1, **options)


def _ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_a_map_inside_a_guard_on_a_wider_limit_stays_within_it() -> None:
    """``concurrency=2``: the guard holds one permit; eight inner calls run under its seat or
    the one permit left, never three at once (as the SDK requests of a body do)."""

    async def main() -> tuple[float, int, int]:
        clock = LoopClock()
        server = Server(clock)
        gate = _gate(clock, server, "a", concurrency=2)

        @gate.guard(backend="a")
        async def outer() -> list[gg.ChatResult | gg.GateError]:
            return await gate.map([{"messages": _ask(f"q{i}")} for i in range(8)])

        async with gate:
            start = clock.now()
            results = await outer()
            assert all(isinstance(r, gg.ChatResult) for r in results), results
            return clock.now() - start, server.peak["a"], gate.stats()["a"].in_flight

    took, peak, left = run_virtual(main)
    assert peak == 2  # both of the limit's places used, never a third
    assert took < 8 * Server.FAST  # two at a time, not one
    assert left == 0


def test_an_inner_call_routed_to_another_backend_takes_its_permit_there() -> None:
    """An inner call that goes to another backend takes that one's permit, within its limit;
    the try is that backend's: what the guard returns (the ``ChatResult``, usage and all) is
    booked once, by the wire on "b" — not again on the guard's "a"."""

    async def main() -> tuple[str, dict[str, int], dict[str, tuple[int, int, int]]]:
        clock = LoopClock()
        server = Server(clock)
        gate = _gate(clock, server, "a", "b")

        @gate.guard(backend="a")
        async def outer() -> gg.ChatResult:
            seen = gate.stats()["b"].in_flight
            assert seen == 0
            return await gate.chat(_ask("elsewhere"), backend="b")

        async with gate:
            result = await outer()
            entries = gate.ledger.entries
            stats = gate.stats()
            booked = {
                name: (entries[name].attempts, entries[name].output_tokens, stats[name].calls)
                for name in ("a", "b")
            }
            return result.backend, server.peak, booked

    backend, peak, booked = run_virtual(main)
    assert backend == "b"
    assert peak == {"b": 1}
    assert booked["a"] == (0, 0, 0)  # nothing of b's answer on a
    assert booked["b"][0] == 1 and booked["b"][1] > 0 and booked["b"][2] == 1


def test_a_guard_without_a_backend_covers_the_backend_it_holds_a_permit_of() -> None:
    """``@gate.guard()`` with no ``backend=`` holds a permit of the backend it was routed to:
    inner calls routed there run under it, those routed to the other take permits there —
    two backends of one slot each, never two requests at one."""

    async def main() -> tuple[list[str], dict[str, int], float]:
        clock = LoopClock()
        server = Server(clock)
        gate = _gate(clock, server, "a", "b")

        @gate.guard()
        async def outer() -> list[str]:
            results = await gate.map([{"messages": _ask(f"q{i}")} for i in range(6)])
            return [r.backend for r in results if isinstance(r, gg.ChatResult)]

        async with gate:
            start = clock.now()
            served = await outer()
            return served, server.peak, clock.now() - start

    served, peak, took = run_virtual(main)
    assert len(served) == 6
    assert peak == {"a": 1, "b": 1}  # both used, neither past its one slot
    assert took < 6 * Server.FAST  # two at a time: the guard's seat at one, a permit at the other


def test_a_hedged_inner_call_borrows_no_permit_past_the_limit() -> None:
    """A stalled inner call on the guard's backend (limit 1) would be duplicated, borrowing a
    permit past the limit outside a guard; under the guard's seat it waits its turn instead."""

    async def main() -> tuple[str, int]:
        clock = LoopClock()
        server = Server(clock, stall=frozenset({"slow"}))
        gate = _gate(clock, server, "a")
        policy = gg.HedgePolicy(min_samples=5, budget_ratio=1.0, quantile=0.5)
        async with gate:
            for i in range(8):  # the backend's normal latency, learned outside any guard
                await gate.chat(_ask(f"warm{i}"), hedge=policy)

            @gate.guard(backend="a")
            async def outer() -> str:
                return (await gate.chat(_ask("slow"), hedge=policy)).text

            text = await outer()
            return text, server.peak["a"]

    text, peak = run_virtual(main)
    assert text
    assert peak == 1  # one request at the server at a time, the duplicate's included
    # (lent a permit past the limit, as outside a guard, the duplicate made it 2)


def test_an_inner_calls_failure_is_retried_by_its_own_policy_not_again_by_the_guard() -> None:
    """One retry policy per failure: the inner call's three tries, then its error reaches the
    guard's caller settled — not 3 guard tries × 3 call tries."""

    async def main() -> tuple[object, int, float]:
        clock = LoopClock()
        backend, engine = sim_backend(
            "gpu", name="a", clock=clock, seed=1, concurrency=1,
            faults=FaultPlan(seed=1, error_rate=1.0),
        )
        gate = gg.Gateway([backend], clock=clock, seed=3, backoff_base_s=0.01,
                          backoff_cap_s=0.05)

        @gate.guard(backend="a")
        async def outer() -> str:
            return (await gate.chat(ASK, max_tokens=5)).text

        async with gate:
            start = clock.now()
            try:
                outcome: object = await outer()
            except gg.GateError as error:
                outcome = error
            return outcome, engine.ledger.snapshot().requests, clock.now() - start

    outcome, requests, took = run_virtual(main)
    assert isinstance(outcome, gg.BackendError), outcome
    assert requests == 3  # the call's own three tries, not nine
    assert took < 10.0


def test_the_inner_calls_span_is_a_child_of_the_guard_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def main() -> None:
        clock = LoopClock()
        server = Server(clock)
        gate = _gate(clock, server, "a", tracer_provider=provider)

        @gate.guard(backend="a")
        async def outer() -> str:
            return (await gate.chat(_ask("q"))).text

        async with gate:
            await outer()

    run_virtual(main)
    spans = exporter.get_finished_spans()
    guard = next(s for s in spans if s.name.startswith("guard "))
    calls = [s for s in spans if s.parent is not None and s.parent.span_id == guard.context.span_id]
    assert [s.name for s in calls] == ["chat m"], [(s.name, s.parent) for s in spans]


def _limit_of_one(handler: Callable[[httpx2.Request], httpx2.Response]) -> gg.Backend:
    return gg.Backend(
        name="a", base_url="http://127.0.0.1:9/v1", model="m", concurrency=1,
        transport=httpx2.MockTransport(handler),
    )


def test_sync_chat_inside_a_sync_guard_on_a_limit_of_one_runs_under_its_permit() -> None:
    seen: list[int] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(1)
        return httpx2.Response(200, json=completion("sync answer"))

    backend = _limit_of_one(handler)
    with gg.SyncGateway([backend], deadline_s=30.0) as gate:

        @gate.guard(backend="a")
        def outer() -> str:
            return gate.chat(ASK, max_tokens=5).text

        outcome: list[object] = []
        caller = threading.Thread(target=lambda: outcome.append(outer()), daemon=True)
        caller.start()
        caller.join(10)
        assert not caller.is_alive(), "the inner chat waited for the permit its guard holds"
        assert outcome == ["sync answer"]
        assert len(seen) == 1
        stats = gate.stats()["a"]
        assert (stats.in_flight, stats.queued) == (0, 0)


def test_sync_stream_and_map_inside_a_sync_guard_on_a_limit_of_one() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if json.loads(request.content).get("stream"):
            return httpx2.Response(
                200, content=sse(["a", "b"]), headers={"content-type": "text/event-stream"}
            )
        return httpx2.Response(200, json=completion("mapped"))

    backend = _limit_of_one(handler)
    with gg.SyncGateway([backend], deadline_s=30.0) as gate:

        @gate.guard(backend="a")
        def outer() -> tuple[str, list[str]]:
            with gate.stream(ASK, max_tokens=5) as stream:
                text = "".join(stream)
            mapped = gate.map([{"messages": ASK, "max_tokens": 5}] * 3)
            return text, [r.text for r in mapped if isinstance(r, gg.ChatResult)]

        outcome: list[object] = []
        caller = threading.Thread(target=lambda: outcome.append(outer()), daemon=True)
        caller.start()
        caller.join(10)
        assert not caller.is_alive(), "an inner call waited for the permit its guard holds"
        assert outcome == [("ab", ["mapped"] * 3)]
        stats = gate.stats()["a"]
        assert (stats.in_flight, stats.queued) == (0, 0)
