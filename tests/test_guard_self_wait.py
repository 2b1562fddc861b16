"""A guarded body that opens a stream, leaves it unread and sends another request on a
backend whose limit is one waits on itself: the stream holds the guard's permit (its seat)
until it is read, and the body cannot read it while it awaits the second request. Before,
the second request waited the first stream's ``idle_timeout`` out — and the stream, hung up
on then, failed when the body went on to read it; now the second request is answered at once
with a 409 that names the cause and the fix (gptgate/guard_self_wait.py), sent nowhere, and
the guard does not try the body again."""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import openai

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual
from tests.streamserver import BASE_URL, GeneratingServer, sdk_on

IDLE_S = 30.0
MESSAGES: Any = [{"role": "user", "content": "hi"}]


async def _second_request_while_unread(
    concurrency: int, *, read_first: bool = False, break_at_end: bool = False
) -> tuple[str, float, int]:
    """(how the body ended, the virtual seconds it took, the requests the server saw).
    ``read_first``: the body reads its stream before the second request (no self-wait);
    ``break_at_end``: it reads it to the chunk that finishes the answer and breaks there,
    leaving the stream open (the ``[DONE]`` came with that chunk)."""
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg, tokens=5, answer_s=0.5)
        backend = gg.Backend(
            name="b", base_url=BASE_URL, model="m", concurrency=concurrency, timeout=100,
            idle_timeout=IDLE_S, transport=httpx2.MockTransport(server),
        )
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            client = sdk_on(gate)

            async def read(stream: Any) -> str:
                parts = []
                async for chunk in stream:
                    if chunk.choices:
                        parts.append(chunk.choices[0].delta.content or "")
                        if break_at_end and chunk.choices[0].finish_reason:
                            break
                return "".join(parts)

            @gate.guard(backend="b")
            async def body() -> str:
                first = await client.chat.completions.create(
                    model="m", messages=MESSAGES, stream=True
                )
                text = await read(first) if read_first or break_at_end else ""
                await client.chat.completions.create(model="m", messages=MESSAGES)
                return text or await read(first)

            start = clock.now()
            try:
                with anyio.fail_after(10 * IDLE_S):  # virtual seconds
                    outcome = await body()
            except openai.ConflictError as exc:
                outcome = f"{type(exc).__name__}: {exc.message}"
            except Exception as exc:  # the stall's end: a hung-up stream
                outcome = type(exc).__name__
            took = clock.now() - start
    return outcome, took, server.requests


def test_a_second_request_behind_its_own_unread_stream_on_a_limit_of_one_fails_at_once() -> None:
    outcome, took, sent = run_virtual(lambda: _second_request_while_unread(1))
    # before: the idle timeout (30 s), then the first stream's read failed
    assert took < 1.0, (outcome, took)
    assert outcome.startswith("ConflictError"), outcome
    assert "unread" in outcome and "read or close" in outcome, outcome
    assert sent == 1  # the second request was not sent, and the body not tried again


def test_on_a_wider_limit_it_takes_a_permit_of_its_own() -> None:
    outcome, took, sent = run_virtual(lambda: _second_request_while_unread(2))
    assert outcome == "w0 w1 w2 w3 w4 " and took < 2.0 and sent == 2


def test_a_stream_read_before_the_next_request_frees_the_seat() -> None:
    outcome, took, sent = run_virtual(lambda: _second_request_while_unread(1, read_first=True))
    assert outcome == "w0 w1 w2 w3 w4 " and took < 2.0 and sent == 2


def test_a_stream_left_open_after_its_whole_answer_is_closed_and_the_request_goes_on() -> None:
    """A ``break`` at the chunk that finishes the answer leaves the stream open, its answer
    whole: it is closed as read to its end and the next request takes the seat at once.
    Before, it waited the idle timeout out (the stream then hung up on)."""
    outcome, took, sent = run_virtual(
        lambda: _second_request_while_unread(1, break_at_end=True)
    )
    assert outcome == "w0 w1 w2 w3 w4 " and sent == 2
    assert took < 2.0, took
