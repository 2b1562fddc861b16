"""gg.ResponseCache: exact-match answers, deterministic by default, TTL, refresh/bypass,
single-flight, streams replayed, Redis shared by two gateways, nothing cached on errors."""

from __future__ import annotations

import functools
import json
import socket
from typing import Any

import anyio
import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import gptgate as gg
from gptgate.response_cache import request_key
from gptgate.response_cache_calls import CACHE_HIT
from gptgate.sim import LoopClock, SimEngine, SimServer, SimTransport, run_virtual
from gptgate.telemetry import NAMES
from tests.fleettools import namespace

#: these tests are about who sends a call, not Redis's speed: a Redis reply read late on a
#: loaded CI box (load 12 on 2 cores) must not turn into an outage that sends it twice
ROOMY_S = 5.0
PRICE = gg.Price(input_per_mtok=1.0, output_per_mtok=4.0)
M = [{"role": "user", "content": "What is a prefix cache?"}]


class Counting(httpx2.AsyncBaseTransport):
    """The simulator, with chat requests counted; ``fail(n)`` may answer the n-th with a
    status instead."""

    def __init__(self, engine: SimEngine, fail: Any = None) -> None:
        self.inner = SimTransport(engine)
        self.requests = 0
        self.fail = fail

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.requests += 1
        status = self.fail(self.requests) if self.fail is not None else None
        if status is not None:
            await anyio.sleep(0.01)  # (virtual) time for identical calls to join it
            return httpx2.Response(status, json={"error": {"message": "no", "type": "x"}})
        return await self.inner.handle_async_request(request)


def _backend(transport: Any, name: str = "b", **options: Any) -> gg.Backend:
    return gg.Backend(
        name=name, base_url="http://127.0.0.1:8000/v1", model="m", transport=transport,
        price=PRICE, **options,
    )


def _gate(
    clock: LoopClock, cache: gg.ResponseCache | None = None, fail: Any = None, **options: Any
) -> tuple[gg.Gateway, Counting]:
    counting = Counting(SimEngine("gpu", clock=clock, seed=3), fail)
    cache = cache if cache is not None else gg.ResponseCache(ttl_s=60, max_entries=100)
    gate = gg.Gateway(
        [_backend(counting)], clock=clock, response_cache=cache, max_attempts=1, **options
    )
    return gate, counting


def test_a_deterministic_request_is_answered_once_then_from_the_cache_at_no_cost() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, server = _gate(clock)
        async with gate:
            first = await gate.chat(M, temperature=0, max_tokens=30)
            again = await gate.chat(M, temperature=0, max_tokens=30)
            seeded = await gate.chat(M, seed=7, max_tokens=30)
            seeded_again = await gate.chat(M, seed=7, max_tokens=30)
            stats = gate.stats()["b"]
        assert server.requests == 2
        assert not first.from_cache and again.from_cache and seeded_again.from_cache
        assert not seeded.from_cache
        assert again.text == first.text and again.finish_reason == first.finish_reason
        assert again.cost_usd == 0.0 and first.cost_usd > 0 and again.attempts == 0
        assert stats.response_cache is not None
        assert (stats.response_cache.hits, stats.response_cache.misses) == (2, 2)
        assert stats.response_cache.bytes > len(first.text)
        assert stats.cost_usd == pytest.approx(first.cost_usd + seeded.cost_usd)
        assert gate.ledger.entries["b"].response_cache_hits == 2

    run_virtual(main)


def test_a_sampled_request_is_cached_only_when_asked() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, server = _gate(clock)
        async with gate:
            for _ in range(2):
                assert not (await gate.chat(M, temperature=0.7, max_tokens=20)).from_cache
            assert server.requests == 2
            await gate.chat(M, temperature=0.7, max_tokens=20, cache="use")
            assert (await gate.chat(M, temperature=0.7, max_tokens=20, cache="use")).from_cache
        assert server.requests == 3

    run_virtual(main)


def test_refresh_calls_again_and_overwrites_bypass_neither_reads_nor_writes() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, server = _gate(clock)
        async with gate:
            await gate.chat(M, temperature=0, max_tokens=20, cache="bypass")
            assert not (await gate.chat(M, temperature=0, max_tokens=20)).from_cache
            assert (await gate.chat(M, temperature=0, max_tokens=20)).from_cache
            refreshed = await gate.chat(M, temperature=0, max_tokens=20, cache="refresh")
            assert not refreshed.from_cache
            assert not (await gate.chat(M, temperature=0, max_tokens=20, cache="bypass")).from_cache
            assert (await gate.chat(M, temperature=0, max_tokens=20)).from_cache
        assert server.requests == 4

    run_virtual(main)


def test_an_answer_expires_after_ttl_s_and_the_store_is_bounded() -> None:
    async def main() -> None:
        clock = LoopClock()
        cache = gg.ResponseCache(ttl_s=10, max_entries=2)
        gate, server = _gate(clock, cache)
        async with gate:
            await gate.chat(M, temperature=0, max_tokens=20)
            await clock.sleep(9)
            assert (await gate.chat(M, temperature=0, max_tokens=20)).from_cache
            await clock.sleep(1.5)
            assert not (await gate.chat(M, temperature=0, max_tokens=20)).from_cache
            for n in range(3):
                await gate.chat(M, temperature=0, max_tokens=21 + n)
        assert server.requests == 5
        assert cache.statistics().entries == 2

    run_virtual(main)


def test_fifty_identical_concurrent_calls_send_one_request() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, server = _gate(clock)
        results: list[gg.ChatResult] = []

        async def one() -> None:
            results.append(await gate.chat(M, temperature=0, max_tokens=40))

        async with gate, anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(one)
        assert server.requests == 1
        assert len({r.text for r in results}) == 1
        assert sum(not r.from_cache for r in results) == 1
        stats = gate.stats()["b"].response_cache
        assert stats is not None and stats.shared == 49 and stats.misses == 1

    run_virtual(main)


def test_a_cancelled_leader_hands_the_call_to_a_follower() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, server = _gate(clock)
        results: list[gg.ChatResult] = []

        async def follower() -> None:
            results.append(await gate.chat(M, temperature=0, max_tokens=40))

        async with gate, anyio.create_task_group() as tg:
            leader = anyio.CancelScope()
            tg.start_soon(_lead, gate, leader)
            await anyio.lowlevel.checkpoint()
            for _ in range(3):
                tg.start_soon(follower)
            await clock.sleep(0.05)
            leader.cancel()
        assert len(results) == 3 and len({r.text for r in results}) == 1
        assert server.requests == 2  # the leader's (abandoned) and one follower's

    run_virtual(main)


async def _lead(gate: gg.Gateway, scope: anyio.CancelScope) -> None:
    with scope:
        await gate.chat(M, temperature=0, max_tokens=40)


async def _timed(
    gate: gg.Gateway, clock: LoopClock, timeout: float, stream: bool = False
) -> tuple[object, float]:
    """An identical long call with its own ``timeout``: its outcome, and when it came."""
    try:
        outcome: object = await gate.chat(
            M, temperature=0, max_tokens=2000, timeout=timeout, stream=stream
        )
    except gg.GateError as error:
        outcome = error
    return outcome, clock.now()


@pytest.mark.parametrize("stream", [False, True])
def test_a_leader_past_its_own_deadline_hands_the_call_to_a_follower(stream: bool) -> None:
    """The leader's tight ``timeout=`` is its own: a follower with a loose one got the
    leader's deadline error (a cut stream, or a timeout) instead of an answer."""

    async def main() -> None:
        clock = LoopClock()
        gate, server = _gate(clock)
        outcomes: dict[str, tuple[object, float]] = {}

        async def one(name: str, timeout: float) -> None:
            outcomes[name] = await _timed(gate, clock, timeout, stream)

        async with gate, anyio.create_task_group() as tg:
            tg.start_soon(one, "leader", 0.5)
            await anyio.lowlevel.checkpoint()
            tg.start_soon(one, "a", 600.0)
            tg.start_soon(one, "b", 600.0)
            tg.start_soon(one, "as tight", 0.5)  # as little time as the leader had: no retry
        leader, a, b, tight = (outcomes[n][0] for n in ("leader", "a", "b", "as tight"))
        assert isinstance(leader, gg.GateError) and isinstance(tight, gg.GateError)
        assert isinstance(a, gg.ChatResult) and isinstance(b, gg.ChatResult), (a, b)
        assert server.requests == 2  # the leader's, then one follower's; the other joined it
        assert a.from_cache != b.from_cache

    run_virtual(main)


def test_a_follower_keeps_its_own_deadline() -> None:
    """A follower waits for an identical call only as long as its own ``timeout=`` allows,
    and one that takes over from a cancelled leader has what is left of it, not a fresh one."""

    async def main() -> None:
        clock = LoopClock()
        gate, server = _gate(clock)
        outcomes: dict[str, tuple[object, float]] = {}

        async def one(name: str, timeout: float) -> None:
            outcomes[name] = await _timed(gate, clock, timeout)

        async with gate, anyio.create_task_group() as tg:
            leader = anyio.CancelScope()

            async def lead() -> None:
                with leader:
                    await one("leader", 600.0)

            tg.start_soon(lead)
            await anyio.lowlevel.checkpoint()
            tg.start_soon(one, "short", 0.5)
            tg.start_soon(one, "taker", 1.0)
            await clock.sleep(0.8)
            leader.cancel()
        short, short_at = outcomes["short"]
        assert isinstance(short, gg.RequestTimeout) and short.deadline
        assert short_at == pytest.approx(0.5, abs=0.01)
        taker, taker_at = outcomes["taker"]
        assert isinstance(taker, gg.GateError) and taker_at <= 1.0 + 0.01, (taker, taker_at)
        assert server.requests == 2

    run_virtual(main)


def test_nothing_is_cached_on_an_error_and_followers_get_the_typed_error() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, server = _gate(clock, fail=lambda n: 500 if n == 1 else None)
        errors: list[BaseException] = []

        async def one() -> None:
            try:
                await gate.chat(M, temperature=0, max_tokens=20)
            except gg.GateError as error:
                errors.append(error)

        async with gate:
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(one)
            assert len(errors) == 3 and all(isinstance(e, gg.BackendError) for e in errors)
            assert not (await gate.chat(M, temperature=0, max_tokens=20)).from_cache
            assert (await gate.chat(M, temperature=0, max_tokens=20)).from_cache
        assert server.requests == 2

    run_virtual(main)


def test_a_stream_replays_a_cached_answer_and_a_stream_left_early_is_not_cached() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, server = _gate(clock)
        async with gate:
            async with gate.stream(M, temperature=0, max_tokens=200) as s:
                async for _ in s:
                    break  # left early: a cut answer
            assert server.requests == 1
            whole = await gate.chat(M, temperature=0, max_tokens=200)
            assert not whole.from_cache and server.requests == 2
            async with gate.stream(M, temperature=0, max_tokens=200) as s:
                pieces = [piece async for piece in s]
            assert "".join(pieces) == whole.text and len(pieces) > 1
            assert s.result.from_cache and s.result.streamed and s.result.cost_usd == 0
            async with gate.stream(M, temperature=0, max_tokens=100) as s2:
                live = "".join([piece async for piece in s2])
            assert (await gate.chat(M, temperature=0, max_tokens=100)).text == live
        assert server.requests == 3

    run_virtual(main)


def test_a_hit_is_a_span_with_gptgate_cache_hit_true() -> None:
    async def main() -> None:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        clock = LoopClock()
        gate, _ = _gate(clock, tracer_provider=provider)
        async with gate:
            await gate.chat(M, temperature=0, max_tokens=20)
            exporter.clear()
            await gate.chat(M, temperature=0, max_tokens=20)
        spans = exporter.get_finished_spans()
        assert [s.name for s in spans] == ["chat m"]
        attributes = spans[0].attributes or {}
        assert attributes[CACHE_HIT] is True and attributes["gptgate.cost_usd"] == 0.0
        # no model was called: nothing a GenAI-aware backend counts as one (gen_ai.*)
        assert not [k for k in attributes if k.startswith("gen_ai.")]
        assert NAMES["call_response_model"] in attributes

    run_virtual(main)


def test_bad_cache_arguments_are_typed_errors() -> None:
    async def main() -> None:
        clock = LoopClock()
        plain = gg.Gateway([_backend(SimTransport(SimEngine("gpu", clock=clock)))], clock=clock)
        async with plain:
            with pytest.raises(gg.BadRequestError, match="needs Gateway"):
                await plain.chat(M, cache="use")
            await plain.chat(M, cache="bypass", max_tokens=5)
            with pytest.raises(gg.BadRequestError, match="cache must be one of"):
                await plain.chat(M, cache="always")  # type: ignore[arg-type]
        with pytest.raises(gg.BadRequestError, match="ttl_s"):
            gg.ResponseCache(ttl_s=0)
        with pytest.raises(gg.BadRequestError, match="max_entries"):
            gg.ResponseCache(max_entries=0)

    run_virtual(main)


_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(0, 2, allow_nan=False),
    st.text(max_size=4), st.lists(st.integers(0, 3), max_size=2),
)
_PARAMS = st.dictionaries(
    st.sampled_from([
        "temperature", "top_p", "seed", "max_tokens", "stop", "tools", "tool_choice",
        "response_format", "presence_penalty", "frequency_penalty", "logit_bias", "n",
    ]),
    _VALUES, max_size=5,
)
_BACKENDS = [
    gg.Backend(name="s", base_url="http://x/v1", model="small-m", tier="small"),
    gg.Backend(name="l", base_url="http://x/v1", model="large-m", tier="large"),
]


@settings(max_examples=300, deadline=None)
@given(a=_PARAMS, b=_PARAMS)
def test_keys_differ_whenever_any_parameter_differs(a: dict[str, Any], b: dict[str, Any]) -> None:
    def read(params: dict[str, Any]) -> str:  # as the server reads it: None is its default,
        return json.dumps({  # and 1.0 is 1 (tests/test_response_cache_key_forms.py)
            k: int(v) if isinstance(v, float) and v.is_integer() else v
            for k, v in params.items() if v is not None
        }, sort_keys=True)

    same = read(a) == read(b)
    assert (request_key(_BACKENDS, M, a) == request_key(_BACKENDS, M, b)) == same
    assert request_key(_BACKENDS, M, a) == request_key(_BACKENDS, M, dict(reversed(a.items())))


def test_keys_differ_by_messages_tier_backend_and_privacy() -> None:
    base = request_key(_BACKENDS, M, {"temperature": 0})
    other = [{"role": "user", "content": "What is a prefix cache!"}]
    assert request_key(_BACKENDS, other, {"temperature": 0}) != base
    assert request_key(_BACKENDS, M, {"temperature": 0}, tier="small") != base
    assert request_key(_BACKENDS, M, {"temperature": 0}, backend="l") != base
    assert request_key(_BACKENDS, M, {"temperature": 0}, private=True) != base
    moved = [_BACKENDS[0], _BACKENDS[1].model_copy(update={"model": "large-2"})]
    assert request_key(moved, M, {"temperature": 0}) != base  # a model changed: a new key


def test_a_redis_cache_is_shared_by_two_gateways_but_not_a_private_backends_answers(
    redis_url: str,
) -> None:
    space = namespace()

    async def main() -> None:
        engine = SimEngine("gpu", seed=3)
        counting = Counting(engine)

        def gate() -> gg.Gateway:
            shared = gg.Shared(redis_url, namespace=space, op_budget_s=ROOMY_S)
            return gg.Gateway(
                [_backend(counting), _backend(counting, name="p", private=True)],
                response_cache=gg.ResponseCache(ttl_s=60, shared=shared),
            )

        one, two = gate(), gate()
        async with one, two:
            first = await one.chat(M, temperature=0, max_tokens=20, backend="b")
            hit = await two.chat(M, temperature=0, max_tokens=20, backend="b")
            assert hit.from_cache and hit.text == first.text
            await one.chat(M, temperature=0, max_tokens=20, private=True)
            assert not (await two.chat(M, temperature=0, max_tokens=20, private=True)).from_cache
            assert (await one.chat(M, temperature=0, max_tokens=20, private=True)).from_cache
        assert counting.requests == 3

    anyio.run(main)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_redis_is_an_outage_and_required_fails_the_start() -> None:
    url = f"redis://127.0.0.1:{_closed_port()}/0"

    async def main() -> None:
        counting = Counting(SimEngine("gpu", seed=3))
        cache = gg.ResponseCache(shared=gg.Shared(url, op_budget_s=0.5))
        gate = gg.Gateway([_backend(counting)], response_cache=cache)
        async with gate:
            await gate.chat(M, temperature=0, max_tokens=20)
            assert (await gate.chat(M, temperature=0, max_tokens=20)).from_cache  # memory
        assert counting.requests == 1 and cache.statistics().shared_errors >= 1
        strict = gg.ResponseCache(shared=gg.Shared(url, op_budget_s=0.5, required=True))
        with pytest.raises(gg.SharedUnreachableError):
            async with gg.Gateway([_backend(counting)], response_cache=strict):
                pass

    anyio.run(main)


def test_identical_calls_from_two_gateways_on_one_redis_send_one_request(
    redis_url: str,
) -> None:
    """Two processes (two gateways here) sending the same deterministic request at once each
    sent it: 2 processes x 20 prompts were 40 requests, as many as without a shared cache. One
    of them leads it fleet-wide now (a claim in Redis); the other waits for its answer."""
    space = namespace()

    async def main() -> tuple[int, list[bool]]:
        clock = gg.ScaledClock(10.0)
        counting = Counting(SimEngine("gpu", clock=clock, seed=3))

        def gate() -> gg.Gateway:
            shared = gg.Shared(redis_url, namespace=space, op_budget_s=ROOMY_S)
            return gg.Gateway(
                [_backend(counting)], clock=clock,
                response_cache=gg.ResponseCache(ttl_s=60, shared=shared),
            )

        one, two = gate(), gate()
        results: list[gg.ChatResult] = []

        async def ask(g: gg.Gateway) -> None:
            results.append(await g.chat(M, temperature=0, max_tokens=20))

        async with one, two, anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(ask, one)
                group.start_soon(ask, two)
        assert len({r.text for r in results}) == 1
        return counting.requests, [r.from_cache for r in results]

    requests, from_cache = anyio.run(main)
    assert requests == 1
    assert from_cache.count(False) == 1


FORK_SCRIPT = """
import os, sys
import gptgate as gg

shared = gg.Shared({redis!r}, namespace={space!r}, op_budget_s={budget!r})
cache = gg.ResponseCache(ttl_s=60, shared=shared)
gate = gg.SyncGateway([gg.Backend(name="sim", base_url=sys.argv[1], model="m")],
                      response_cache=cache)
asked = [{{"role": "user", "content": "parent"}}]
gate.chat(asked, temperature=0, max_tokens=5)  # the parent's Redis client is made and used
pid = os.fork()
if pid == 0:
    try:
        hit = gate.chat(asked, temperature=0, max_tokens=5).from_cache
        gate.chat([{{"role": "user", "content": "child"}}], temperature=0, max_tokens=5)
        print("child", hit, cache.statistics().shared_errors, flush=True)
    except BaseException as error:
        print("child", repr(error), flush=True)
    finally:
        os._exit(0)
os.waitpid(pid, 0)
child = gate.chat([{{"role": "user", "content": "child"}}], temperature=0, max_tokens=5)
print("parent", child.from_cache, flush=True)
gate.close()
"""


def test_a_shared_cache_works_in_a_forked_child(redis_url: str, tmp_path: Any) -> None:
    """gunicorn --preload / Celery prefork: a child's first call through a ``SyncGateway``
    whose ``ResponseCache(shared=)`` the parent had used raised ``RuntimeError`` ("attached
    to a different loop"): the child used the parent's Redis client. Each process has its own
    client now, and the child's answers reach the parent through Redis."""
    from tests.test_sync_gateway import run_script

    engine = SimEngine("gpu", clock=gg.ScaledClock(20.0), seed=3)
    with SimServer(engine, time_scale=20.0) as base_url:
        source = FORK_SCRIPT.format(redis=redis_url, space=namespace(), budget=ROOMY_S)
        done = run_script(source, base_url, tmp_path)
    assert done.stdout.splitlines() == ["child True 0", "parent True"]
    assert "Error" not in done.stderr and "Warning" not in done.stderr, done.stderr
    assert engine.ledger.snapshot().ok == 2


def test_a_fleet_of_private_backends_does_not_wait_for_each_others_calls(
    redis_url: str,
) -> None:
    """Private answers never reach Redis (without ``share_private``): two gateways whose
    backends are all private each send their own call at once, neither waiting for a claim."""
    space = namespace()

    async def main() -> tuple[int, int]:
        clock = gg.ScaledClock(10.0)
        counting = Counting(SimEngine("gpu", clock=clock, seed=3))

        def gate() -> gg.Gateway:
            shared = gg.Shared(redis_url, namespace=space)
            return gg.Gateway(
                [_backend(counting, private=True)], clock=clock,
                response_cache=gg.ResponseCache(ttl_s=60, shared=shared),
            )

        one, two = gate(), gate()
        async with one, two:
            async with anyio.create_task_group() as group:
                group.start_soon(functools.partial(one.chat, M, temperature=0, max_tokens=20))
                group.start_soon(functools.partial(two.chat, M, temperature=0, max_tokens=20))
            peak = counting.inner.engine.ledger.snapshot().peak_in_flight
        return counting.requests, peak

    requests, peak = anyio.run(main)
    assert (requests, peak) == (2, 2)  # side by side, not one after the other


def test_a_process_waits_for_another_ones_identical_call_only_within_its_own_deadline(
    redis_url: str,
) -> None:
    """Across a fleet a follower polled Redis for the claim holder's answer for as long as
    that call took, whatever its own ``timeout=``."""
    space = namespace()

    async def main() -> tuple[object, float, float]:
        clock = gg.ScaledClock(5.0)
        counting = Counting(SimEngine("gpu", clock=clock, seed=3))

        def gate() -> gg.Gateway:
            shared = gg.Shared(redis_url, namespace=space)
            return gg.Gateway(
                [_backend(counting)], clock=clock, max_attempts=1,
                response_cache=gg.ResponseCache(ttl_s=60, shared=shared),
            )

        one, two = gate(), gate()
        ended: dict[str, tuple[object, float]] = {}

        async def call(name: str, gate: gg.Gateway, timeout: float) -> None:
            ended[name] = await _timed(gate, clock, timeout)

        async with one, two, anyio.create_task_group() as group:
            group.start_soon(call, "leader", one, 600.0)
            await clock.sleep(0.3)  # its claim is in Redis
            started = clock.now()
            group.start_soon(call, "follower", two, 1.0)
        follower, follower_at = ended["follower"]
        return follower, follower_at - started, ended["leader"][1] - started

    follower, waited, leader_took = anyio.run(main)
    assert isinstance(follower, gg.RequestTimeout) and follower.deadline, follower
    assert waited < 3.0 < leader_took, (waited, leader_took)
