"""A stream manager an ``@gate.guard``-ed function returns unentered (anthropic's
``client.messages.stream(...)``) is entered by the guard on its try's permit: its request is
the guarded call's — limited once, retried by the guard, followed until read
(gptgate/guard_manager.py). Over real loopback HTTP against the simulator's Messages API."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import anyio
import pytest
from anthropic.lib.streaming import AsyncMessageStreamManager, MessageStreamManager

import gptgate as gg
from gptgate.guard_manager import entered, is_stream_manager
from gptgate.sim import ANTHROPIC_PROFILE, SimEngine, SimServer
from gptgate.sim.anthropic import bill_usd
from gptgate.sim.faults import FAULT_HEADER

SCALE = 50.0
MODEL = "claude-sonnet-4-5"
PRICE = gg.Price(input_per_mtok=3.0, output_per_mtok=15.0)


@pytest.fixture
def server() -> Iterator[tuple[str, SimEngine]]:
    profile = ANTHROPIC_PROFILE.model_copy(update={"output_tokens_mean": 40})
    sim = SimEngine(profile, clock=gg.ScaledClock(SCALE), seed=5)
    with SimServer(sim, time_scale=SCALE) as base_url:
        yield base_url.removesuffix("/v1"), sim  # Anthropic's base_url is the server root


#: the gateways keep real time (only the server runs 50× fast): nothing here is bounded by
#: the gateway's clock, and on ``ScaledClock(50)`` its bounds were fractions of a second of
#: wall time — an attempt's 60 s timeout 1.2 s, a queue that has not moved 196 s 3.9 s, which
#: six callers waiting while two streams were read slowly outlasted on a loaded machine ("the
#: queue has not moved for 196s", 5 of 5 runs beside four busy loops). Back-off is short so
#: a retried try costs no real second.
GATE_OPTIONS: dict[str, Any] = {
    "clock": gg.SystemClock(), "seed": 3, "backoff_base_s": 0.01, "backoff_cap_s": 0.05,
}


def _backend(root: str, concurrency: int) -> gg.Backend:
    return gg.Backend(
        name="claude", provider="anthropic", base_url=root, model=MODEL, api_key="sk-ant-test",
        price=PRICE, concurrency=concurrency, timeout=60.0, idle_timeout=600.0,
    )


def _gateway(root: str, concurrency: int) -> gg.Gateway:
    return gg.Gateway([_backend(root, concurrency)], **GATE_OPTIONS)


def _ask(i: int) -> list[Any]:
    return [{"role": "user", "content": f"Question {i}: name a prime."}]


@pytest.mark.parametrize("on_gate_client", [True, False])
async def test_a_returned_stream_manager_is_sent_and_held_by_its_guard(
    server: tuple[str, SimEngine], on_gate_client: bool
) -> None:
    """Eight callers under ``concurrency=2``, each entering the manager its guarded function
    returned and reading it slowly: one call each on the backend (before: two on
    ``gate.http_client``, the second outside the guard's permit), each stream read while its
    guard's permit is held and never more than two open — on the gateway's client or the
    SDK's own (before: no permit held while read, eight open at once) — and the ledger equal
    to the server's bill."""
    root, sim = server
    gate = _gateway(root, concurrency=2)
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test", base_url=root, max_retries=0,
        http_client=gate.http_client("claude") if on_gate_client else None,
    )

    @gate.guard(backend="claude")
    async def ask(i: int) -> Any:
        return client.messages.stream(model=MODEL, max_tokens=30, messages=_ask(i))

    state: Any = None  # the backend's live state, once the gateway is open
    open_streams = most_open = unheld = 0
    texts: list[str] = []

    async def caller(i: int) -> None:
        nonlocal open_streams, most_open, unheld
        manager = await ask(i)
        assert isinstance(manager, AsyncMessageStreamManager)  # still the SDK's class
        async with manager as stream:
            open_streams += 1
            most_open = max(most_open, open_streams)
            parts = []
            async for text in stream.text_stream:
                assert state is not None
                if state.limiter.in_flight < open_streams:  # a stream read without a permit
                    unheld += 1
                parts.append(text)
                await anyio.sleep(0.005)
            open_streams -= 1
        texts.append("".join(parts))

    async with gate:
        state = gate.backend_state("claude")
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(caller, i)
        stats = gate.stats()["claude"]
        entry = gate.ledger.entries.get("claude")
    assert len(texts) == 8 and all(texts)
    assert stats.calls == 8 and stats.in_flight == 0
    assert most_open <= 2 and unheld == 0  # each stream read on its guard's permit
    if on_gate_client:  # billed through the gateway's client: the ledger is the bill
        assert entry is not None and entry.streamed_attempts == 8
        snap = sim.ledger.snapshot()
        assert (entry.input_tokens, entry.output_tokens) == (
            snap.input_tokens, snap.output_tokens)
        assert abs(entry.cost_usd - bill_usd(snap, 3.0, 15.0)) < 1e-9


async def test_a_returned_stream_manager_that_fails_to_open_is_retried_by_its_guard(
    server: tuple[str, SimEngine],
) -> None:
    """The first try's request is answered with a 500: the guard retries the function (the
    SDK has ``max_retries=0``), and the caller reads the second try's stream. Before, the
    caller's ``async with`` raised the SDK's ``InternalServerError``."""
    root, _ = server
    gate = _gateway(root, concurrency=2)
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test", base_url=root, max_retries=0,
        http_client=gate.http_client("claude"),
    )
    tries = 0

    @gate.guard(backend="claude")
    async def ask() -> Any:
        nonlocal tries
        tries += 1
        headers = {FAULT_HEADER: "500"} if tries == 1 else {}
        return client.messages.stream(
            model=MODEL, max_tokens=30, messages=_ask(0), extra_headers=headers
        )

    async with gate:
        async with await ask() as stream:
            text = "".join([t async for t in stream.text_stream])
        stats = gate.stats()["claude"]
    assert text and tries == 2
    assert (stats.calls, stats.retries, stats.in_flight) == (2, 1, 0)


async def test_only_unentered_stream_managers_are_entered() -> None:
    """Another async context manager a guarded function returns is the caller's to enter."""

    class Session:
        entered = 0

        async def __aenter__(self) -> Session:
            Session.entered += 1
            return self

        async def __aexit__(self, *exc_info: object) -> None:
            return None

    async def returns(value: object) -> object:
        return value

    session = Session()
    assert not is_stream_manager(session)
    assert await entered(returns(session)) is session and Session.entered == 0


def test_a_sync_guard_enters_the_stream_manager_its_function_returns(
    server: tuple[str, SimEngine],
) -> None:
    """``SyncGateway.guard`` and the sync SDK: the ``MessageStreamManager`` returned unentered
    is entered in the caller's thread on the try's permit — one call, a 500 on the first try
    retried by the guard, the permit held until the stream is read."""
    root, _ = server
    with gg.SyncGateway([_backend(root, 2)], **GATE_OPTIONS) as gate:
        client = anthropic.Anthropic(
            api_key="sk-ant-test", base_url=root, max_retries=0,
            http_client=gate.http_client("claude"),
        )
        tries = 0

        @gate.guard(backend="claude")
        def ask() -> Any:
            nonlocal tries
            tries += 1
            headers = {FAULT_HEADER: "500"} if tries == 1 else {}
            return client.messages.stream(
                model=MODEL, max_tokens=30, messages=_ask(0), extra_headers=headers
            )

        manager = ask()
        assert isinstance(manager, MessageStreamManager)
        held = []
        with manager as stream:
            parts = []
            for text in stream.text_stream:
                held.append(gate.stats()["claude"].in_flight)
                parts.append(text)
        stats = gate.stats()["claude"]
    assert "".join(parts) and tries == 2
    assert held and min(held) == 1  # read on the guard's permit
    assert (stats.calls, stats.retries, stats.in_flight) == (2, 1, 0)
