"""An Anthropic stream left after two deltas is booked at what the server billed for it.

A Messages stream's ``message_start`` carries a usage whose ``output_tokens`` is the first
token's (1), and ``message_delta`` replaces it at the end. A stream the caller left before
the end kept that 1 as the answer's count: 20 streams left after two text deltas were booked
20 output tokens where the server billed ~120 (found by a new-user combination: Anthropic SDK
streams through a guard beside hedged chats and Azure calls, the ledger 4.9% under the bill).
Every path reads it the same way now: ``gate.stream``, the anthropic SDK on
``gate.http_client``, and a guard returning ``messages.stream(...)`` unentered.

The input side the same: ``message_start`` gives the prompt's cache reads and writes, and a
stream left mid-answer was booked at its whole prompt at the full input price — 240 streams
over a shared 2,000-token system prompt, left after 1-30 deltas, booked $1.72 where the
server billed $0.43 (+297%: 483,243 tokens read from the cache at 0.1x booked as uncached).
"""

from __future__ import annotations

from typing import Any

import anthropic
import anyio
import pytest

import gptgate as gg
from gptgate.sim import ANTHROPIC_PROFILE, LoopClock, SimEngine, SimTransport, run_virtual

ROOT = "http://127.0.0.1:1"
MODEL = ANTHROPIC_PROFILE.model


#: a ~2,000-token system prompt, over the model's cache minimum: the server caches it
SYSTEM = "You are a careful assistant. " * 300


async def _left_after_two(path: str, cached: bool = False) -> tuple[Any, Any]:
    clock = LoopClock()
    engine = SimEngine(ANTHROPIC_PROFILE, clock=clock, seed=3)
    backend = gg.Backend(name="claude", provider="anthropic", base_url=ROOT, model=MODEL,
                         api_key="sk-ant-test", concurrency=8, transport=SimTransport(engine))
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=ROOT,
                                          http_client=gate.http_client("claude"), max_retries=0)

        # the SDK marks the prefix itself; gptgate marks gate.stream's
        system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
        sdk_system: Any = system if cached else anthropic.NOT_GIVEN

        @gate.guard(backend="claude")
        async def guarded(i: int) -> Any:
            return client.messages.stream(
                model=MODEL, max_tokens=80, messages=_ask(i), system=sdk_system
            )

        async def one(i: int) -> None:
            if path == "gate.stream":
                own = [{"role": "system", "content": SYSTEM}] if cached else []
                async with gate.stream(own + _ask(i), max_tokens=80) as stream:
                    await _two(stream)
                return
            manager = await guarded(i) if path == "guard" else client.messages.stream(
                model=MODEL, max_tokens=80, messages=_ask(i), system=sdk_system
            )
            async with manager as stream:
                await _two(stream.text_stream)

        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(one, i)
                    await clock.sleep(0.3)
            await clock.sleep(30)  # every hang-up noticed, every late estimate settled
        entry = gate.ledger.entries["claude"]
    return entry, engine.ledger.snapshot()


def _ask(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Question {i}: name three teas."}]


async def _two(deltas: Any) -> None:
    read = 0
    async for _ in deltas:
        read += 1
        if read >= 2:
            break


@pytest.mark.parametrize("path", ["gate.stream", "sdk", "guard"])
def test_a_left_anthropic_stream_is_booked_as_billed(path: str) -> None:
    booked, billed = run_virtual(_left_after_two, path)
    assert billed.output_tokens > 20 * 2  # generated past the first token before it noticed
    assert booked.input_tokens == billed.input_tokens
    assert booked.output_tokens == billed.output_tokens


@pytest.mark.parametrize("path", ["gate.stream", "sdk", "guard"])
def test_a_left_anthropic_stream_books_the_servers_cache_reads_and_writes(path: str) -> None:
    booked, billed = run_virtual(_left_after_two, path, True)
    assert billed.cached_input_tokens > 15 * 2_000  # most of the 20 read the prefix
    assert (booked.input_tokens, booked.cached_input_tokens, booked.cache_write_input_tokens) == (
        billed.input_tokens, billed.cached_input_tokens, billed.cache_write_input_tokens
    )
    assert booked.output_tokens == billed.output_tokens
