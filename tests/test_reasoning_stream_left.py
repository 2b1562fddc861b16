"""A reasoning stream left (or cut) mid-reasoning is booked at the reasoning it had streamed.

``deepseek-reasoner`` (and vLLM's or ollama's reasoning parsers) streams its reasoning first,
as ``delta.reasoning_content`` with no ``content``, and the server bills it as output. A
stream the caller left before the answer's text — a deadline, a cancelled task, an SDK
caller that read some reasoning deltas and hung up — was booked as if nothing had arrived:
from the elapsed time through the backend's latency line, which is 0 before any answer taught
it (20 SDK streams left after 3 reasoning deltas: 0 output tokens booked where the server
billed 577). A stream the server cut mid-reasoning was booked 0 output the same way. The
reasoning that arrived is counted now, like text (~4 characters a token), on every path."""

from __future__ import annotations

from typing import Any

import anyio
import openai
import pytest

import gptgate as gg
from gptgate.sim import DEEPSEEK_PROFILE, LoopClock, SimEngine, SimTransport, run_virtual
from gptgate.wire.anthropic_stream import MessagesAccumulator
from gptgate.wire.openai import StreamAccumulator

ROOT = "http://127.0.0.1:1"
MODEL = "deepseek-reasoner"
#: long answers, three quarters reasoning: nobody reaches the text before leaving; a write
#: per token or two, as DeepSeek streams (the server bills what it generated until it saw
#: the hang-up, which a coarse write would hide from the client)
PROFILE = DEEPSEEK_PROFILE.model_copy(
    update={"model": MODEL, "output_tokens_mean": 400, "stream_chunks": 400}
)


def _ask(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Question {i}: why is the sky blue?"}]


async def _left_mid_reasoning(path: str) -> tuple[Any, Any, list[int]]:
    clock = LoopClock()
    engine = SimEngine(PROFILE, clock=clock, seed=3)
    backend = gg.Backend(name="ds", provider="deepseek", base_url=ROOT, model=MODEL,
                         api_key="sk-test", concurrency=8, transport=SimTransport(engine))
    texts: list[int] = []
    async with gg.Gateway([backend], clock=clock, seed=1, max_attempts=2) as gate:
        client = openai.AsyncOpenAI(api_key="sk-test", base_url=ROOT, max_retries=0,
                                    http_client=gate.http_client("ds"))

        async def one(i: int) -> None:
            if path == "gate.stream":  # a deadline that ends mid-reasoning
                with anyio.move_on_after(1.5):
                    async with gate.stream(_ask(i), max_tokens=800) as stream:
                        texts.extend(len(d) for d in [d async for d in stream] if d)
                return
            if path == "cut":  # the server drops the connection mid-reasoning
                with pytest.raises(gg.GateError):
                    await gate.chat(_ask(i), max_tokens=800, stream=True,
                                    extra_headers={"x-sim-fault": "reset"})
                return
            stream = await client.chat.completions.create(
                model=MODEL, messages=_ask(i), max_tokens=800, stream=True  # type: ignore[arg-type]
            )
            read = 0
            async for chunk in stream:
                delta: Any = chunk.choices[0].delta if chunk.choices else None
                texts.append(len(delta.content or "") if delta is not None else 0)
                if delta is not None and getattr(delta, "reasoning_content", None):
                    read += 1
                    if read >= 30:
                        break
            await stream.close()

        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(one, i)
                    await clock.sleep(0.3)
            await clock.sleep(30)  # every hang-up noticed, every late estimate settled
        entry = gate.ledger.entries["ds"]
    return entry, engine.ledger.snapshot(), texts


@pytest.mark.parametrize("path", ["gate.stream", "sdk", "cut"])
def test_a_stream_left_mid_reasoning_is_booked_at_its_reasoning(path: str) -> None:
    booked, billed, texts = run_virtual(_left_mid_reasoning, path)
    assert not any(texts)  # no answer text reached anyone: all of it was reasoning
    assert billed.output_tokens > 20 * 10
    assert booked.input_tokens == billed.input_tokens
    assert abs(booked.output_tokens - billed.output_tokens) <= 0.05 * billed.output_tokens


def test_every_kind_of_output_counts_before_the_usage() -> None:
    """What a stream cut before its usage is booked at: reasoning, a tool call's pieces and
    Anthropic's thinking are output the server bills, like text (~4 characters a token)."""
    chat = StreamAccumulator()
    chat.feed({"choices": [{"index": 0, "delta": {"reasoning_content": "x" * 40}}]})
    chat.feed({"choices": [{"index": 0, "delta": {"reasoning": "y" * 20}}]})
    chat.feed({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c1", "function": {"name": "lookup", "arguments": '{"q": "7"}'}}]}}]})
    assert chat.has_output and not chat.has_content
    assert chat.output_tokens() == ((40 + 20 + 6 + 10 + 3) // 4, False)

    claude = MessagesAccumulator()
    claude.feed({"type": "message_start", "message": {"id": "m", "usage": {
        "input_tokens": 10, "output_tokens": 1}}})
    claude.feed({"type": "content_block_start", "index": 0,
                 "content_block": {"type": "thinking", "thinking": ""}})
    claude.feed({"type": "content_block_delta", "index": 0,
                 "delta": {"type": "thinking_delta", "thinking": "z" * 80}})
    claude.feed({"type": "content_block_delta", "index": 0,
                 "delta": {"type": "signature_delta", "signature": "s" * 200}})
    assert claude.has_output and claude.output_tokens() == (20, False)
