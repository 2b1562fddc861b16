"""The official SDK on ``gate.http_client``: a stream its caller leaves with ``break`` and no
``close()`` (the everyday "preview" pattern).

It used to keep its permit until Python's cycle collector ran (the SDK's stream object sits
in a reference cycle): the next calls failed with "no permit", the server generated and
billed every token, and the ledger booked only the 9 the caller read, as certain. Now its
permit comes back as soon as its object is dropped — or, still referenced but unread, after
the backend's ``idle_timeout`` — gptgate hangs up, and what the caller never read is booked
as possibly billed.
"""

from __future__ import annotations

import gc

import anyio
import anyio.lowlevel
import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.ledger import LedgerEntry
from gptgate.testing import LoopClock, run_virtual
from tests.streamserver import BASE_URL, GeneratingServer, raised_by, sdk_on

PRICE = gg.Price(input_per_mtok=1000.0, output_per_mtok=2000.0)


def _gate(server: GeneratingServer, clock: LoopClock, **options: float) -> gg.Gateway:
    backend = gg.Backend(
        name="b", base_url=BASE_URL, model="m", concurrency=3, timeout=10, price=PRICE,
        transport=httpx2.MockTransport(server), **options,  # type: ignore[arg-type]
    )
    return gg.Gateway([backend], clock=clock, seed=1)


def _client(gate: gg.Gateway) -> openai.AsyncOpenAI:
    return sdk_on(gate, timeout=3)


async def _first_words(
    client: openai.AsyncOpenAI, n: int = 3, max_tokens: int | openai.NotGiven = openai.NOT_GIVEN
) -> str:
    """Read the first ``n`` words of a streamed answer, then ``break`` (no close)."""
    stream = await client.chat.completions.create(
        model="m", stream=True, messages=[{"role": "user", "content": "hi"}],
        max_tokens=max_tokens,
    )
    words: list[str] = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            words.append(chunk.choices[0].delta.content)
        if len(words) == n:
            break
    return "".join(words)


async def _previews() -> dict[str, object]:
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg)
        gate = _gate(server, clock)
        async with gate:
            client = _client(gate)
            async with anyio.create_task_group() as callers:
                for _ in range(3):
                    callers.start_soon(_first_words, client)
            await clock.sleep(1.0)
            held, running = gate.stats()["b"].in_flight, server.running
            generated = server.generated
            got: list[str] = []
            with anyio.fail_after(10):
                async with anyio.create_task_group() as callers:
                    for _ in range(3):

                        async def one() -> None:
                            got.append(await _first_words(client))

                        callers.start_soon(one)
            # the second round's streams are dropped within 5 s of the first collection: they
            # wait for the next one (a full collection runs at most every 5 s)
            await clock.sleep(6.0)
            round_one = gate.ledger.total()
        tg.cancel_scope.cancel()
    return {
        "held": held, "running": running, "generated": generated, "got": got,
        "total": round_one, "all_generated": server.generated,
    }


def test_a_stream_left_with_break_gives_its_permit_back_and_is_booked_as_possibly_billed() -> None:
    out = run_virtual(_previews)
    assert out["held"] == 0  # the permits came back once the callers dropped their streams
    assert out["running"] == 0  # ... and gptgate hung up
    assert out["got"] == ["w0 w1 w2 "] * 3  # the next round gets permits
    total = out["total"]
    assert isinstance(total, LedgerEntry)
    generated = out["all_generated"]
    assert isinstance(generated, int) and generated >= 600
    # every token the server generated is in the ledger (read off the wire on hang-up) ...
    assert total.output_tokens >= 0.9 * generated
    # ... and all but the 18 words the callers read is booked as possibly billed
    assert total.uncertain_tokens >= 0.9 * (generated - 18)
    assert total.uncertain_tokens < total.output_tokens


async def _kept_unread() -> tuple[int, int, int, BaseException | None]:
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg, tokens=10_000, per_token_s=0.01)
        gate = _gate(server, clock, idle_timeout=5.0)
        async with gate:
            client = _client(gate)
            stream = await client.chat.completions.create(
                model="m", stream=True, messages=[{"role": "user", "content": "hi"}]
            )
            await stream.__anext__()
            await clock.sleep(4.0)
            before = gate.stats()["b"].in_flight
            await clock.sleep(2.0)  # unread past idle_timeout (5 s)
            after, running = gate.stats()["b"].in_flight, server.running
            error = await raised_by(stream.__anext__())
        tg.cancel_scope.cancel()
    return before, after, running, error


def test_a_stream_kept_but_unread_is_hung_up_after_the_idle_timeout() -> None:
    before, after, running, error = run_virtual(_kept_unread)
    assert before == 1  # a pause shorter than idle_timeout is the caller's right
    assert after == 0 and running == 0
    assert isinstance(error, gg.RequestTimeout)
    assert "hung up" in str(error)


@pytest.mark.parametrize("close", [True, False])
def test_a_stream_read_to_its_end_or_closed_is_unchanged(close: bool) -> None:
    async def main() -> tuple[int, LedgerEntry]:
        clock = LoopClock()
        async with anyio.create_task_group() as tg:
            server = GeneratingServer(tg, tokens=20)
            gate = _gate(server, clock)
            async with gate:
                client = _client(gate)
                stream = await client.chat.completions.create(
                    model="m", stream=True, messages=[{"role": "user", "content": "hi"}]
                )
                if close:
                    async with stream:
                        await stream.__anext__()
                else:
                    _ = [chunk async for chunk in stream]
                await clock.sleep(0.2)  # past abandon_grace_s after a close mid-answer
                held = gate.stats()["b"].in_flight
                total = gate.ledger.total()
            tg.cancel_scope.cancel()
        return held, total

    held, total = run_virtual(main)
    assert held == 0
    assert total.uncertain_tokens == 0  # no hang-up: what arrived is what was read


async def _previews_in_one_task() -> tuple[list[str], float, int]:
    """A worker loop: one long-lived task makes six previews in a row on a limit of 3."""
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg)
        gate = _gate(server, clock)
        async with gate:
            client = sdk_on(gate, timeout=20)
            got: list[str] = []
            began = clock.now()
            for _ in range(6):
                got.append(await _first_words(client))
            took = clock.now() - began
            await clock.sleep(7.0)
            held = gate.stats()["b"].in_flight
        tg.cancel_scope.cancel()
    return got, took, held


def test_a_stream_dropped_by_a_task_that_lives_on_gives_its_permit_back() -> None:
    """The task that read the stream is still alive (a worker loop): its dropped streams are
    found by a collection too, not only after the backend's 30 s idle bound."""
    got, took, held = run_virtual(_previews_in_one_task)
    assert got == ["w0 w1 w2 "] * 6
    # the fourth preview waits for one of the first three's permits: a collection runs at
    # most every 5 s, a stream is probed after 1 s unread
    assert took < 8.0, took
    assert held == 0


async def _collected_first() -> tuple[LedgerEntry, int, int]:
    """A preview whose dropped stream is closed by the collector's finalizer (the SDK's
    generator closes its response) before its watchdog looks: any collection does that,
    the application's or another stream's watchdog's."""
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg, tokens=200, per_token_s=0.01)
        gate = _gate(server, clock)
        async with gate:
            client = _client(gate)
            async with anyio.create_task_group() as callers:
                callers.start_soon(_first_words, client, 2, 40)  # ends: its stream is dropped
            await clock.sleep(0.15)  # the server goes on generating into the socket
            gc.collect()  # before the watchdog probes (0.2 s unread)
            for _ in range(5):
                await anyio.lowlevel.checkpoint()  # the finalizer's close runs
            await clock.sleep(0.5)
            total, held = gate.ledger.total(), gate.stats()["b"].in_flight
        tg.cancel_scope.cancel()
    return total, server.generated, held


def test_a_stream_the_collector_closes_is_hung_up_and_booked_as_generated() -> None:
    total, generated, held = run_virtual(_collected_first)
    assert held == 0
    assert generated >= 15
    # what the server had sent is read off the wire, and what it may have generated until
    # the hang-up (its max_tokens, 40: no answer taught the backend's pace yet) is booked,
    # the unread rest as possibly billed (the collector's close booked only the 2 words
    # read, as certain; then the drain missed the words still in flight)
    assert total.output_tokens == 40 >= generated
    assert total.uncertain_tokens == 40 - 2


async def _unread_at_the_close() -> tuple[LedgerEntry, int, BaseException | None]:
    """A stream its caller keeps but stopped reading when the gateway closes."""
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg, tokens=200, per_token_s=0.01)
        gate = _gate(server, clock)
        await gate.__aenter__()
        client = _client(gate)
        stream = await client.chat.completions.create(
            model="m", stream=True, messages=[{"role": "user", "content": "hi"}], max_tokens=40
        )
        await stream.__anext__()
        await stream.__anext__()
        await clock.sleep(0.1)  # unread: the server goes on generating
        await gate.aclose(grace_s=0.05)
        total = gate.ledger.total()
        error = await raised_by(stream.__anext__())
        tg.cancel_scope.cancel()
    return total, server.generated, error


def test_a_stream_left_unread_at_the_close_is_booked_as_possibly_generated() -> None:
    total, generated, error = run_virtual(_unread_at_the_close)
    assert isinstance(error, gg.GatewayClosedError)
    assert generated >= 10
    # the close hung up on it: what the server may have generated by then (its max_tokens:
    # no answer taught the backend's pace yet) is booked, all but the two words read
    # possibly billed — it used to book the two words read, as certain
    assert total.output_tokens == 40
    assert total.uncertain_tokens == 40 - 2


def test_what_a_stream_hung_up_on_may_have_generated_is_bounded() -> None:
    """``BilledWork.possibly_generated``: the backend's pace once an answer taught it (the
    same line ``gate.chat`` uses for a request cut before its first token), else the
    request's ``max_tokens`` — never more."""
    from gptgate.billed import BilledWork

    work = BilledWork()
    assert work.possibly_generated(3.0, 40) == 40  # nothing learnt yet: its max_tokens
    assert work.possibly_generated(3.0, None) == 0
    for tokens in (10, 20, 40):
        work.observe(0.5 + 0.1 * tokens, tokens, None)  # 0.5 s to the first, 0.1 s a token
    assert work.possibly_generated(2.5, 100) == 20
    assert work.possibly_generated(60.0, 100) == 100


async def _closed_mid_answer() -> tuple[int, int, LedgerEntry]:
    """A caller reads three chunks, dawdles 1 s (the server generates on into the socket:
    100 tokens), then ``close()``s the stream."""
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg, tokens=1_000, per_token_s=0.01, first_s=0.05)
        gate = _gate(server, clock)
        async with gate:
            stream = await _client(gate).chat.completions.create(
                model="m", stream=True, messages=[{"role": "user", "content": "hi"}],
                max_tokens=150,
            )
            read = 0
            async for chunk in stream:
                read += bool(chunk.choices and chunk.choices[0].delta.content)
                if read == 3:
                    break
            await clock.sleep(1.0)
            await stream.close()
            await clock.sleep(0.2)
            total = gate.ledger.total()
        tg.cancel_scope.cancel()
    return read, server.generated, total


def test_a_stream_closed_mid_answer_books_what_the_server_generated_meanwhile() -> None:
    """The SDK's ``break`` + ``close()``: what the server generated past what the caller read
    is possibly billed, as for a stream gptgate hung up on — it had booked the three tokens
    read, as certain, while the server billed ~100 (the simulator: 10-20 tokens a closed
    preview, a run of them 4% under the bill). Before the backend taught a pace, the stream's
    own (its deltas after the first) says how much: not ``max_tokens``, which booked 80 for
    each preview closed at once where the server billed 1-6
    (tests/test_anthropic_stream_left.py)."""
    read, generated, total = run_virtual(_closed_mid_answer)
    assert read == 3 and generated >= 90
    assert 0.7 * generated <= total.output_tokens <= 1.3 * generated  # an estimate (77 of 102)
    assert total.uncertain_tokens == total.output_tokens - read  # all but what was read
